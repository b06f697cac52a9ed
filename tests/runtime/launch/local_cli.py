"""``sporch`` as a subprocess for the local-run tests (tests/runtime/launch, tests/runtime/models):
the real CLI with the environment a user has, plus this folder on the ranks' PYTHONPATH for the
``launch_hooks:NAME`` entrypoints."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from tests.testutil import ROOT as REPO

TINY = REPO / "examples" / "tiny.yaml"
#: This folder: the ranks import ``launch_hooks`` from it by name.
HOOKS = Path(__file__).resolve().parent


def sporch(*args: str, env: dict | None = None, timeout: float = 300) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "sporch.orchestrator.cli.main", *args], cwd=REPO, text=True,
                          capture_output=True, timeout=timeout, env={**os.environ, **(env or {})})


def hooks_env() -> dict:
    return {"PYTHONPATH": os.pathsep.join([str(HOOKS), str(REPO), os.environ.get("PYTHONPATH", "")])}


def local2(folder: Path) -> Path:
    """clusters/local.yaml with 2 ranks (1 node x 2 CPU ranks, cluster ``local2``, node
    ``local2-node0``), written into ``folder``: the fewest ranks that show a launch's behaviour
    (each rank process imports torch: seconds of CPU). ``--cluster`` takes its path."""
    text = (REPO / "clusters" / "local.yaml").read_text(encoding="utf-8")
    assert "name: local\n" in text and "gpus_per_node: 4\n" in text, "clusters/local.yaml changed: update local2()"
    path = Path(folder) / "local2.yaml"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text.replace("name: local\n", "name: local2\n").replace("gpus_per_node: 4\n", "gpus_per_node: 2\n"))
    return path
