"""Fixtures for the submission tests.

``slurm_cluster`` comes from tests/conftest.py. ``sporch_home`` isolates job records.
"""

from __future__ import annotations

from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = ROOT / "examples"


@pytest.fixture
def sporch_home(tmp_path, monkeypatch):
    home = tmp_path / "sporch-home"
    monkeypatch.setenv("SPORCH_HOME", str(home))
    monkeypatch.delenv("SPORCH_DEBUG", raising=False)
    monkeypatch.delenv("SPORCH_CLUSTERS", raising=False)
    return home


@pytest.fixture
def run_cli(capsys):
    """Run ``sporch`` in-process: (exit code, stdout, stderr); sys.exit inside a command counts."""
    from sporch.orchestrator.cli.main import main

    def _run(*args):
        try:
            code = main([str(a) for a in args])
        except SystemExit as e:
            code = e.code if isinstance(e.code, int) else 1
        out = capsys.readouterr()
        return code, out.out, out.err

    return _run
