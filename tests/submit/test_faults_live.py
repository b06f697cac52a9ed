"""Faults of Slurm jobs on the loopback lab (issue 9): a rank killed by a signal is the root
cause; a job that ends without result.json is FAILED with the batch log's reason."""

from __future__ import annotations

import pytest

from test_submit_live import Sporch

pytestmark = [pytest.mark.slurm, pytest.mark.slow]


@pytest.fixture(scope="module")
def sporch(slurm_cluster, tmp_path_factory, scancel_recorded):
    root = tmp_path_factory.mktemp("faults-live")
    s = Sporch(root / "home", root / "runs")
    yield s
    scancel_recorded((s.home / "jobs").glob("*.json"))


def test_a_rank_killed_by_a_signal_is_blamed_not_its_peers(sporch):
    rec = sporch.submit("entrypoint=examples.hooks:die_on_rank", "resources.nodes=2", "name=die", "--via", "sbatch",
                        env={"SPORCH_DIE_RANK": "2", "SPORCH_DIST_TIMEOUT_S": "60"})
    p = sporch("wait", rec["id"], "--interval", "1", "--timeout", "150", timeout=180)
    assert p.returncode == 1, p.stdout + p.stderr
    st = sporch.status(rec["id"])
    assert st["failed_rank"] == 2, st
    assert st["error"].startswith("rank 2 died: killed by signal 9 (SIGKILL) on "), st
