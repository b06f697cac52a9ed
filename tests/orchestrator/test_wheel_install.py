"""``pip install .`` (a real wheel, not editable) ships clusters/templates/examples and finds them."""

from __future__ import annotations

import os
import subprocess
import sys
import venv

import pytest

from orch_testutil import ROOT


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
    for needed in ("orchestrator/_data/clusters/a100x32.yaml", "orchestrator/_data/templates/sbatch.j2",
                   "orchestrator/_data/examples/tiny.yaml", "orchestrator/plan/schema.py"):
        assert needed in names

    env_dir = tmp_path / "venv"
    venv.EnvBuilder(system_site_packages=True, with_pip=False, symlinks=True).create(env_dir)
    py = env_dir / "bin" / "python"
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
    assert builtin[0].rstrip().endswith(os.path.join("orchestrator", "_data", "clusters"))
    jd = str(elsewhere / "j")
    shipped = os.path.join(os.path.dirname(builtin[0].split(": ", 1)[1].rstrip()), "examples", "tiny.yaml")
    r = subprocess.run([str(env_dir / "bin" / "sporch"), "render", "-c", "local", shipped, "--job-dir", jd],
                       cwd=elsewhere, env=env, capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    assert f"python -m runtime.launch --plan {jd}/plan.json" in r.stdout
