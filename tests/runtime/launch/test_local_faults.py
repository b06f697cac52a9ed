"""Faults of local runs (issue 9): a late rank, a killed rank, a hung rank, a killed supervisor.

Each run starts 2 rank processes (clusters/local.yaml's 2-rank twin, local_cli.local2; they were
4) that import torch (a few seconds of CPU each on 2 cores). The status/record test that was here
(issue 9 item 16) is test_local_run.py's test_status_logs_wait_and_cancel_work_on_a_local_runs_id
(its benchmark run) and test_verify_sharded_equals_unsharded (its verify run's outcome).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time

import pytest

from sporch.orchestrator.contract.exit_codes import EXIT_OK
from tests.runtime.launch.local_cli import HOOKS, REPO, TINY, alive, hooks_env, local2, rank_pids, sporch
from tests.runtime.launch.on_ranks import plan_file, run_point_on_ranks


def _run_hook(tmp_path, entrypoint: str, env: dict, *overrides: str):
    """``sporch run --local`` of tiny.yaml with ``entrypoint`` on 2 ranks: (process, result.json,
    local.json)."""
    run_dir = tmp_path / "run"
    proc = sporch("run", "--local", "--cluster", str(local2(tmp_path)), str(TINY), f"entrypoint={entrypoint}", *overrides,
                  "--run-dir", str(run_dir), "--timeout", "200", env={**hooks_env(), **env})
    result = json.loads((run_dir / "result.json").read_text())
    return proc, result, json.loads((run_dir / "local.json").read_text())


def test_a_rank_that_finishes_late_is_gathered_not_failed(tmp_path, monkeypatch):
    """Rank 3 finishes its workload 6 s after the others (longer than rank 0's wait for rank
    files): every rank takes part in gathering the records, so the run completes with all 4.
    The gather is run_point's: the point runs on the session's rank pool (on_ranks.py; it was a
    launch), and every rank's exit code is EXIT_OK, the launch's 0."""
    monkeypatch.syspath_prepend(str(HOOKS))
    run_dir = tmp_path / "run"
    plan = plan_file(run_dir, "entrypoint=launch_hooks:slow_rank", "parallel.ring=4", "parallel.ulysses=1")
    codes = run_point_on_ranks(plan, run_dir, {"SPORCH_TEST_SLOW_RANK": "3", "SPORCH_TEST_SLOW_S": "6"})
    result = json.loads((run_dir / "result.json").read_text())
    assert result["status"] == "completed", result
    assert sorted(result["hosts"]) == ["0", "1", "2", "3"]
    assert codes == [EXIT_OK] * 4


def test_a_killed_rank_is_blamed_not_the_peer_that_lost_its_connection(tmp_path):
    """kill -9 of rank 1: the summary, result.json and the record's status name rank 1 and its
    signal, not rank 0's "Connection reset by peer"."""
    proc, result, state = _run_hook(tmp_path, "examples.hooks:die_on_rank", {"SPORCH_DIE_RANK": "1",
                                    "SPORCH_DIST_TIMEOUT_S": "60"}, "parallel.ring=2", "parallel.ulysses=1")
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert result["failed_rank"] == 1, result
    assert result["error"] == "rank 1 died: killed by signal 9 (SIGKILL) on local2-node0"
    assert "rank 1 died: killed by signal 9" in proc.stdout
    assert state["state"] == "FAILED" and state["failed_rank"] == 1


def test_a_hung_rank_is_ended_and_named(tmp_path):
    """Rank 1 sleeps while rank 0 finishes: its gather times out, the job fails, and the
    runner stops rank 1 (instead of waiting for it) and names it. The process group's timeout
    also bounds how far apart the healthy ranks reach their gather after joining (each builds
    its model first): 20 s, not 5, so that on a loaded machine only rank 1's sleep times out."""
    proc, result, state = _run_hook(tmp_path, "launch_hooks:hang_rank", {"SPORCH_TEST_HANG_RANK": "1",
                                    "SPORCH_DIST_TIMEOUT_S": "20"}, "parallel.ring=2", "parallel.ulysses=1")
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert result["failed_rank"] == 1, result
    assert "rank 1 hung" in result["error"] and "rank 1 hung" in proc.stdout
    assert state["stopped"] == {"1": "hung"}


# SIGTERM (what `sporch cancel` sends a local run's runner: local_backend.cancel) was a second
# parametrization here; it is test_local_run.py's test_status_logs_wait_and_cancel_work_on_a_local_runs_id,
# which checks the same (no rank outlives the runner, local.json CANCELLED) after its cancel.
@pytest.mark.parametrize("sig", [signal.SIGHUP])
def test_terminating_the_runner_leaves_no_rank_behind(sig, tmp_path):
    run_dir = tmp_path / "run"
    env = {**os.environ, **hooks_env(), "SPORCH_SLEEP_S": "600"}
    proc = subprocess.Popen([sys.executable, "-m", "sporch.orchestrator.cli.main", "run", "--local", "--cluster",
                             str(local2(tmp_path)), str(TINY), "entrypoint=examples.hooks:sleep", "--run-dir", str(run_dir)],
                            cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        deadline = time.monotonic() + 120
        ranks: list[int] = []
        while len(ranks) < 2 and time.monotonic() < deadline and proc.poll() is None:
            time.sleep(0.2)
            ranks = rank_pids(proc.pid)
        assert len(ranks) == 2, proc.communicate(timeout=5)
        proc.send_signal(sig)
        proc.wait(timeout=60)
        deadline = time.monotonic() + 10
        while any(alive(p) for p in ranks) and time.monotonic() < deadline:
            time.sleep(0.2)
        assert not [p for p in ranks if alive(p)], "rank processes outlived the runner"
        assert json.loads((run_dir / "local.json").read_text())["state"] == "CANCELLED"
    finally:
        if proc.poll() is None:
            proc.kill()
