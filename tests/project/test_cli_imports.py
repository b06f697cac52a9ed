"""The CLI stays lean: cheap commands import none of the heavy libraries, and the dry run none of
the submitting machinery (bench/cli_startup.py measures the time; this says what is loaded).

Each command runs in a fresh interpreter (sys.modules of this one is full of test imports);
the probe prints what it found of the names it is told to look for.
"""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from tests.testutil import EXAMPLES

PROBE = """
import contextlib, io, json, sys
from sporch.orchestrator.cli.main import main
with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
    code = main({argv!r})
names = {names!r}
found = sorted(m for m in sys.modules if any(m == n or m.startswith(n + ".") for n in names))
print(json.dumps({{"code": code, "found": found}}))
"""

#: Never needed before a job runs (torch, the runtime), nor to write a report's plots, nor to
#: reach a login host or submit (paramiko, submitit).
HEAVY = ("torch", "sporch.runtime", "numpy", "safetensors", "matplotlib", "paramiko", "submitit")
#: What only a command that reads YAML, renders a script or prints a table loads.
CONFIG_AND_OUTPUT = ("omegaconf", "yaml", "jinja2", "rich")
#: The submitting side: the job store, the ssh/Slurm command runners, the backends.
SUBMITTING = ("sporch.orchestrator.jobs", "sporch.orchestrator.host", "sporch.orchestrator.remote.ssh",
              "sporch.orchestrator.remote.pool", "sporch.orchestrator.slurm.commands",
              "sporch.orchestrator.submit.submitter", "sporch.orchestrator.submit.registry")


def loaded(tmp_path, argv: list[str], names: tuple[str, ...]) -> list[str]:
    r = subprocess.run([sys.executable, "-c", PROBE.format(argv=argv, names=names)], capture_output=True,
                       text=True, cwd=tmp_path, timeout=120)
    assert r.returncode == 0, r.stderr
    out = json.loads(r.stdout.strip().splitlines()[-1])
    assert out["code"] == 0, (argv, r.stderr)
    return out["found"]


@pytest.mark.parametrize("argv", [["--help"], ["plan", "--help"], ["submit", "--help"], ["campaign", "--help"]],
                         ids=" ".join)
def test_help_imports_nothing_heavy(tmp_path, argv):
    assert loaded(tmp_path, argv, HEAVY + CONFIG_AND_OUTPUT) == []


def test_top_level_help_loads_no_command(tmp_path):
    found = loaded(tmp_path, ["--help"], ("sporch.orchestrator.config", "sporch.orchestrator.plan",
                                          "sporch.orchestrator.submit", "sporch.orchestrator.campaign"))
    assert found == []


#: What a plain job and cluster file no longer need (config/loading.py, "the plain path"): OmegaConf
#: and what it imports (its grammar's antlr4 runtime, attrs) are most of the dry run's start-up.
OMEGACONF = ("omegaconf", "antlr4", "attr")


def test_dry_run_loads_no_submitting_machinery(tmp_path):
    argv = ["submit", "--dry-run", "--cluster", "a100x32", str(EXAMPLES / "wan14b-720p.yaml")]
    assert loaded(tmp_path, argv, HEAVY + SUBMITTING + OMEGACONF) == []


def test_overrides_still_load_omegaconf(tmp_path):
    """The probe can see OmegaConf: a KEY=VALUE override takes the OmegaConf path."""
    argv = ["submit", "--dry-run", "--cluster", "a100x32", str(EXAMPLES / "wan14b-720p.yaml"), "workload.steps=4"]
    assert "omegaconf" in loaded(tmp_path, argv, OMEGACONF)
