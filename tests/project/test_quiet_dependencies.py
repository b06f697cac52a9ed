"""A user's log shows sporch's lines (issue 51, D): torchao, which every diffusers import pulls in
once it is installed and which then logs at import with torch 2.13 (an extension built for another
Python, deprecated enum registrations), is installed only for ``model.quant``: its own extra,
never one that ``scripts/setup.sh`` (README's first command) installs by default. The test suite
installs it (``scripts/test.sh``) for model.quant's tests. (Measured in a fresh venv: docs/performance.md,
"Low-bit weights".)"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import tomllib

from tests.testutil import ROOT

NOISY = "torchao"


def extras() -> dict[str, list[str]]:
    return tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]


def test_torchao_is_only_in_the_quant_extra():
    found = {name for name, reqs in extras().items() if any(re.match(rf"{NOISY}\b", r) for r in reqs)}
    assert found == {"quant"}, found


def test_setup_installs_no_noisy_extra_by_default_and_the_tests_install_it():
    setup = (ROOT / "scripts" / "setup.sh").read_text()
    default = re.search(r"\$\{SPORCH_EXTRAS:-([\w,]+)\}", setup).group(1).split(",")
    assert "quant" not in default and {"runtime", "pipelines"} <= set(default)
    assert all(name in extras() for name in default)
    test = (ROOT / "scripts" / "test.sh").read_text()
    assert re.search(r"SPORCH_EXTRAS=[\w,]*\bquant\b[\w,]* \./scripts/setup\.sh", test)


def test_a_local_run_with_model_quant_and_no_torchao_is_one_line(tmp_path):
    """Without the quant extra, ``run --local`` with ``model.quant`` is refused before any rank
    starts (the ranks would die on a ModuleNotFoundError), naming the extra."""
    probe = ("import sys; sys.modules['torchao'] = None  # as if not installed\n"
             "from sporch.orchestrator.cli.main import main\n"
             f"sys.exit(main(['run', '--local', '--cluster', 'local', {str(ROOT / 'examples' / 'tiny.yaml')!r}, "
             f"'model.quant=int8_weight', '--run-dir', {str(tmp_path / 'run')!r}]))")
    proc = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=120,
                          env={**os.environ, "SPORCH_HOME": str(tmp_path / "home")})
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert proc.stderr.startswith("sporch: error: model.quant=int8_weight") and "sporch[quant]" in proc.stderr
    assert proc.stderr.count("\n") == 1 and not (tmp_path / "run").exists()
