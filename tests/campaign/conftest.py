"""Every test of this folder runs without user or environment cluster folders (the
``isolated_cluster_search`` fixture of tests/conftest.py), and records campaign history into a
store of its own (``$SPORCH_HISTORY`` in a temporary folder, never the user's)."""

import pytest


@pytest.fixture(autouse=True)
def _no_user_clusters(isolated_cluster_search):
    return isolated_cluster_search


@pytest.fixture(autouse=True)
def history_store(tmp_path_factory, monkeypatch):
    """The history store this test's commands record into (not there until something is recorded)."""
    path = tmp_path_factory.mktemp("history") / "history.sqlite"
    monkeypatch.setenv("SPORCH_HISTORY", str(path))
    return path
