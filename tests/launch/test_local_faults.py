"""Faults of local runs (issue 9): a late rank, a killed rank, a hung rank, a killed supervisor.

Each run starts 4 rank processes that import torch (a few seconds on 2 cores).
"""

from __future__ import annotations

import json

from test_local_run import TINY, hooks_env, sporch


def test_a_rank_that_finishes_late_is_gathered_not_failed(tmp_path):
    """Rank 3 finishes its workload 6 s after the others (longer than rank 0's wait for rank
    files): every rank takes part in gathering the records, so the run completes with all 4."""
    run_dir = tmp_path / "run"
    env = {**hooks_env(), "SPORCH_TEST_SLOW_RANK": "3", "SPORCH_TEST_SLOW_S": "6"}
    proc = sporch("run", "--local", "--cluster", "local", str(TINY), "entrypoint=launch_hooks:slow_rank",
                  "parallel.ring=4", "parallel.ulysses=1", "--run-dir", str(run_dir), "--timeout", "120", env=env)
    result = json.loads((run_dir / "result.json").read_text())
    assert result["status"] == "completed", result
    assert sorted(result["hosts"]) == ["0", "1", "2", "3"]
    assert proc.returncode == 0, proc.stdout + proc.stderr
