"""Hangs name the rank (issue 19 item 4), with ``sporch run --local`` on 2 gloo ranks of the tiny
preset (clusters/local.yaml's 2-rank twin, local_cli.local2; they were 4): a rank that sleeps before its collective (fault injection, SPORCH_FAULT_HANG_*) makes
the watchdog end the job (no earlier than the collective timeout), ``sporch status`` names it and
its node, and every other rank's stack file shows the collective it waited in; a job still
running at its time limit (``resources.time``) ends there as TIMEOUT, as Slurm would end it.

No clock of the test's own decides a verdict: how soon after the timeout a loaded machine gets
round to ending the ranks is noise. What ended the run is read from the records instead (the
watchdog's hang records and result.json; the local runner's local.json), and only lower bounds
are timed (the watchdog did not fire, the runner did not stop the ranks, before their limit).

Each run starts 2 rank processes that import torch (5-8 s on 2 busy cores).
"""

from __future__ import annotations

import json
import re
import signal
import time

import pytest

from tests.runtime.launch.local_cli import TINY, hooks_env, local2, sporch

TIMEOUT_S = 10

CASES = {
    # (overrides, the rank that sleeps, before which collective, the collective its peers wait in, their frame)
    "ulysses-all-to-all": (("parallel.ring=1", "parallel.ulysses=2"), 1, "all_to_all", "ulysses_qkv", "in qkv_in"),
    "ring-p2p": (("parallel.ring=2", "parallel.ulysses=1"), 1, "p2p", "ring_kv", "in ring_attention"),
}


def _run_id(proc) -> str:
    return re.search(r"id (tiny-\S+)", proc.stderr.replace("\n", " ")).group(1)


@pytest.mark.parametrize("case", sorted(CASES))
def test_a_rank_that_never_arrives_is_named_with_its_node(case, tmp_path):
    overrides, rank, before, collective, frame = CASES[case]
    run_dir, env = tmp_path / "run", {"SPORCH_HOME": str(tmp_path / "home"), "SPORCH_FAULT_HANG_RANK": str(rank),
                                      "SPORCH_FAULT_HANG_BEFORE": before, "COLUMNS": "400"}
    proc = sporch("run", "--local", "--cluster", str(local2(tmp_path)), str(TINY), *overrides,
                  f"resources.collective_timeout={TIMEOUT_S}", "--run-dir", str(run_dir), env=env, timeout=200)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    records = {r: json.loads((run_dir / "hang" / f"rank{r}.json").read_text()) for r in range(2)}
    peers = [r for r in range(2) if r != rank]

    # every other rank's stacks show the collective it waited in. The first to time out alerts
    # the rest: a peer that entered later (a loaded machine) may hear the alert before its own
    # timeout, so it says "alerted"; either way it waited in the collective, and the watchdog
    # fired no earlier than the timeout (a lower bound: load cannot break it)
    timed_out = [r for r in peers if records[r]["state"] == "timeout"]
    assert timed_out, {r: records[r]["state"] for r in peers}
    for r in peers:
        assert records[r]["state"] in ("timeout", "alerted") and records[r]["collective"]["name"] == collective
        text = (run_dir / "hang" / f"rank{r}.txt").read_text()
        line = text.splitlines()[1]
        said = "timeout: waited" if r in timed_out else "alerted: a peer timed out; this rank was waiting"
        assert line.startswith(said) and collective in line, line
        assert frame in text  # faulthandler's frame inside the collective
    assert all(records[r]["collective"]["waited_s"] >= TIMEOUT_S for r in timed_out), records
    # the one that never arrived: no collective, its stack in the injected sleep
    assert records[rank]["state"] == "alerted" and records[rank]["collective"] is None
    assert "in _injected_hang" in (run_dir / "hang" / f"rank{rank}.txt").read_text()

    result = json.loads((run_dir / "result.json").read_text())
    expected = f"rank {rank} (local2-node0) never arrived at {collective} ("
    assert result["failed_rank"] == rank and result["error"].startswith(expected), result["error"]
    assert result["hang"]["never_arrived"] == [rank] and result["hang"]["waited"] == peers
    assert expected in proc.stdout  # run's summary

    [st] = json.loads(sporch("status", "--json", _run_id(proc), env=env).stdout)
    assert st["state"] == "FAILED" and st["failed_rank"] == rank and st["error"].startswith(expected)
    assert expected in sporch("status", _run_id(proc), env=env).stdout  # the table


def test_the_time_limit_ends_a_local_run_as_timeout(tmp_path):
    """Every rank sleeps (no collective, so the watchdog has nothing to say): the runner ends
    the ranks at resources.time, as Slurm would, and the run is TIMEOUT; each rank's log ends
    with its stacks (SIGTERM). 2 ranks and a 30 s limit (they were 4 and 40 s): the limit
    only has to leave the ranks time to start and reach their sleep (the stacks say they did)."""
    run_dir, env = tmp_path / "run", {**hooks_env(), "SPORCH_HOME": str(tmp_path / "home"), "SPORCH_SLEEP_S": "600"}
    start = time.monotonic()
    proc = sporch("run", "--local", "--cluster", str(local2(tmp_path)), str(TINY), "entrypoint=examples.hooks:sleep",
                  "resources.time=00:00:30", "--run-dir", str(run_dir), env=env, timeout=200)
    took = time.monotonic() - start
    assert proc.returncode == 3, proc.stdout + proc.stderr
    # not before the limit (a lower bound: load only makes the run longer). How long after it is
    # noise; that the limit ended the run, and nothing else, is what the runner recorded: every
    # rank stopped for "limit" and ended by that SIGTERM (the ranks would sleep 600 s; a crash,
    # the runner's kill after a failure or its SIGKILL would give another code)
    assert took >= 30, took
    assert "TIMEOUT: the time limit resources.time=00:00:30 was reached" in proc.stderr
    state = json.loads((run_dir / "local.json").read_text())
    assert state["state"] == "TIMEOUT" and state["stopped"] == {str(r): "limit" for r in range(2)}, state
    assert state["returncodes"] == {str(r): -signal.SIGTERM for r in range(2)}, state
    [st] = json.loads(sporch("status", "--json", _run_id(proc), env=env).stdout)
    assert st["state"] == "TIMEOUT" and "time limit (00:00:30) was reached" in st["error"]
    for rank in range(2):
        assert "in sleep" in (run_dir / "logs" / f"rank{rank}.log").read_text()
