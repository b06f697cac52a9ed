"""Every test of this folder runs without user or environment cluster folders (the
``isolated_cluster_search`` fixture of tests/conftest.py)."""

import pytest


@pytest.fixture(scope="session")
def held_out():
    """Each published table predicted by a fit to the others (``leave_one_table_out``), made once:
    test_validation.py checks the figures, test_predict_cmd.py that ``sporch predict --validate``
    prints them."""
    from sporch.orchestrator.plan.validation import leave_one_table_out

    return {s.name: s for s in leave_one_table_out()}


@pytest.fixture(autouse=True)
def _no_user_clusters(isolated_cluster_search):
    return isolated_cluster_search
