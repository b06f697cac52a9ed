from __future__ import annotations

import pytest


@pytest.fixture(autouse=True)
def _isolated_cluster_search(monkeypatch, tmp_path_factory):
    """No user/env cluster folders leak into tests."""
    home = tmp_path_factory.mktemp("home")
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.delenv("SPORCH_CLUSTERS", raising=False)
    monkeypatch.delenv("SPORCH_DEBUG", raising=False)


@pytest.fixture
def run_cli(capsys):
    """Run ``sporch`` in-process: returns (exit code, stdout, stderr)."""
    from sporch.orchestrator.cli.main import main

    def _run(*args: str):
        code = main([str(a) for a in args])
        out = capsys.readouterr()
        return code, out.out, out.err

    return _run

