"""Every test of this folder runs without user or environment cluster folders (the
``isolated_cluster_search`` fixture of tests/conftest.py)."""

import pytest


@pytest.fixture(autouse=True)
def _no_user_clusters(isolated_cluster_search):
    return isolated_cluster_search
