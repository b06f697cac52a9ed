"""Faults of local runs (issue 9): a late rank, a killed rank, a hung rank, a killed supervisor.

Each run starts 4 rank processes that import torch (a few seconds on 2 cores).
"""

from __future__ import annotations

import json
import re
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from sporch.orchestrator.contract.exit_codes import EXIT_OK
from tests.runtime.launch.local_cli import HOOKS, REPO, TINY, hooks_env, sporch
from tests.runtime.launch.on_ranks import plan_file, run_point_on_ranks


def _run_hook(tmp_path, entrypoint: str, env: dict, *overrides: str):
    """``sporch run --local`` of tiny.yaml with ``entrypoint`` on 4 ranks: (process, result.json,
    local.json)."""
    run_dir = tmp_path / "run"
    proc = sporch("run", "--local", "--cluster", "local", str(TINY), f"entrypoint={entrypoint}", *overrides,
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
                                    "SPORCH_DIST_TIMEOUT_S": "60"}, "parallel.ring=2", "parallel.ulysses=2")
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert result["failed_rank"] == 1, result
    assert result["error"] == "rank 1 died: killed by signal 9 (SIGKILL) on local-node0"
    assert "rank 1 died: killed by signal 9" in proc.stdout
    assert state["state"] == "FAILED" and state["failed_rank"] == 1


def test_a_hung_rank_is_ended_and_named(tmp_path):
    """Rank 3 sleeps while the others finish: their gather times out, the job fails, and the
    runner stops rank 3 (instead of waiting for it) and names it. The process group's timeout
    also bounds how far apart the healthy ranks reach their gather after joining (each builds
    its model first): 20 s, not 5, so that on a loaded machine only rank 3's sleep times out."""
    proc, result, state = _run_hook(tmp_path, "launch_hooks:hang_rank", {"SPORCH_TEST_HANG_RANK": "3",
                                    "SPORCH_DIST_TIMEOUT_S": "20"}, "parallel.ring=4", "parallel.ulysses=1")
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert result["failed_rank"] == 3, result
    assert "rank 3 hung" in result["error"] and "rank 3 hung" in proc.stdout
    assert state["stopped"] == {"3": "hung"}


def _rank_pids(parent: int) -> list[int]:
    """Pids of the rank processes (``sporch.runtime.launch``) whose parent is ``parent``."""
    out = []
    for d in Path("/proc").iterdir():
        if not d.name.isdigit():
            continue
        try:
            stat = (d / "stat").read_text()
            cmd = (d / "cmdline").read_bytes().replace(b"\0", b" ").decode()
        except OSError:
            continue
        if int(stat.rsplit(")", 1)[1].split()[1]) == parent and "sporch.runtime.launch" in cmd:
            out.append(int(d.name))
    return out


def _alive(pid: int) -> bool:
    try:
        return (Path("/proc") / str(pid) / "stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGHUP])
def test_terminating_the_runner_leaves_no_rank_behind(sig, tmp_path):
    run_dir = tmp_path / "run"
    env = {**os.environ, **hooks_env(), "SPORCH_SLEEP_S": "600"}
    proc = subprocess.Popen([sys.executable, "-m", "sporch.orchestrator.cli.main", "run", "--local", "--cluster", "local",
                             str(TINY), "entrypoint=examples.hooks:sleep", "--run-dir", str(run_dir)],
                            cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        deadline = time.monotonic() + 120
        ranks: list[int] = []
        while len(ranks) < 4 and time.monotonic() < deadline and proc.poll() is None:
            time.sleep(0.2)
            ranks = _rank_pids(proc.pid)
        assert len(ranks) == 4, proc.communicate(timeout=5)
        proc.send_signal(sig)
        proc.wait(timeout=60)
        deadline = time.monotonic() + 10
        while any(_alive(p) for p in ranks) and time.monotonic() < deadline:
            time.sleep(0.2)
        assert not [p for p in ranks if _alive(p)], "rank processes outlived the runner"
        assert json.loads((run_dir / "local.json").read_text())["state"] == "CANCELLED"
    finally:
        if proc.poll() is None:
            proc.kill()


def _run_id(proc) -> str:
    return re.search(r"id (tiny-\S+)", proc.stderr.replace("\n", " ")).group(1)


def test_status_shows_outcome_progress_and_the_record_keeps_the_final_state(tmp_path):
    """Issue 9 item 16: rank 0 prints a line per step (what `logs -f` shows); status shows the
    progress as step i/N and the outcome (step time, verify error); record.json's final is set."""
    env = {"SPORCH_HOME": str(tmp_path / "home")}
    bench = sporch("run", "--local", "--cluster", "local", str(TINY), "workload.kind=benchmark",
                   "workload.repeat=3", "--run-dir", str(tmp_path / "bench"), env=env)
    assert bench.returncode == 0, bench.stdout + bench.stderr
    log = (tmp_path / "bench" / "logs" / "rank0.log").read_text()
    assert [m.group(1) for m in re.finditer(r"^sporch: step (\d+/\d+)", log, re.M)] == ["1/3", "2/3", "3/3"]
    [s] = json.loads(sporch("status", "--json", _run_id(bench), env=env).stdout)
    assert s["progress"] == "step 3/3"
    assert re.fullmatch(r"step [\d.e+-]+ ms \(median\)", s["outcome"]), s
    record = json.loads((tmp_path / "bench" / "record.json").read_text())
    assert record["final"]["state"] == "COMPLETED" and record["final"]["outcome"] == s["outcome"]

    verify = sporch("run", "--local", "--cluster", "local", str(TINY), "--run-dir", str(tmp_path / "verify"), env=env)
    assert verify.returncode == 0, verify.stdout + verify.stderr
    table = sporch("status", _run_id(verify), env={**env, "COLUMNS": "250"}).stdout
    assert "verify ok: max_abs_err" in table
