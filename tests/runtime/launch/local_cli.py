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
