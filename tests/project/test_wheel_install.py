"""``pip install .`` (a real wheel, not editable) ships clusters/templates/examples and finds them."""

from __future__ import annotations

import os
import site
import subprocess
import sys
import venv

import pytest

from tests.testutil import ROOT


def _venv_seeing_this_interpreters_packages(env_dir):
    """A fresh venv whose python also sees the running interpreter's site-packages (torch, jinja2, ...).

    ``system_site_packages=True`` is not enough: inside a virtualenv it exposes the *base*
    interpreter's packages, not the outer venv's. A .pth file that lists this interpreter's
    site directories works in both cases, and (unlike ``addsitedir``) does not run their .pth
    files, so the editable install of the checkout stays out of the way of the wheel.
    """
    venv.EnvBuilder(system_site_packages=False, with_pip=False, symlinks=True).create(env_dir)
    py = env_dir / "bin" / "python"
    inner = subprocess.run([str(py), "-c", "import sysconfig; print(sysconfig.get_path('purelib'))"],
                           check=True, capture_output=True, text=True).stdout.strip()
    outer = [d for d in site.getsitepackages() + [site.getusersitepackages()] if os.path.isdir(d)]
    with open(os.path.join(inner, "zz_outer_site.pth"), "w", encoding="utf-8") as fh:
        fh.write("\n".join(outer) + "\n")
    return py


@pytest.mark.slow
def test_wheel_ships_data_and_cli_works(tmp_path):
    dist = tmp_path / "dist"
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q", "-w", str(dist), str(ROOT)],
        check=True, capture_output=True, timeout=120,
    )
    wheels = list(dist.glob("sporch-*.whl"))
    assert len(wheels) == 1
    import zipfile

    names = zipfile.ZipFile(wheels[0]).namelist()
    for needed in ("sporch/orchestrator/_data/clusters/a100x32.yaml", "sporch/orchestrator/_data/templates/sbatch.j2",
                   "sporch/orchestrator/_data/examples/tiny.yaml", "sporch/orchestrator/contract/plan.py",
                   "sporch/runtime/launch.py"):
        assert needed in names
    # Nothing generic at the top of site-packages: only the sporch namespace and its metadata.
    tops = {n.split("/", 1)[0] for n in names}
    assert tops == {"sporch", wheels[0].name.split("-")[0] + "-" + wheels[0].name.split("-")[1] + ".dist-info"}, tops

    env_dir = tmp_path / "venv"
    py = _venv_seeing_this_interpreters_packages(env_dir)
    subprocess.run(
        [sys.executable, "-m", "pip", "--python", str(py), "install", "--no-deps", "--force-reinstall",
         "--ignore-installed", "-q", str(wheels[0])],
        check=True, capture_output=True, timeout=120,
    )
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "SPORCH_CLUSTERS")}
    env["HOME"] = str(tmp_path)
    r = subprocess.run([str(env_dir / "bin" / "sporch"), "clusters", "list"], cwd=elsewhere, env=env,
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    for name in ("a100x32", "h100x64", "l40x16", "local", "slurmlab"):
        assert name in r.stdout
    builtin = [line for line in r.stdout.splitlines() if line.startswith("builtin: ")]
    assert builtin and builtin[0].split(": ", 1)[1].startswith(str(env_dir))
    assert builtin[0].rstrip().endswith(os.path.join("sporch", "orchestrator", "_data", "clusters"))
    jd = str(elsewhere / "j")
    shipped = os.path.join(os.path.dirname(builtin[0].split(": ", 1)[1].rstrip()), "examples", "tiny.yaml")
    r = subprocess.run([str(env_dir / "bin" / "sporch"), "render", "-c", "local", shipped, "--job-dir", jd],
                       cwd=elsewhere, env=env, capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    assert f"export SPORCH_PLAN={jd}/plan.json" in r.stdout
    assert 'python -m sporch.runtime.launch --plan "$SPORCH_JOB_DIR/plan.json"' in r.stdout
