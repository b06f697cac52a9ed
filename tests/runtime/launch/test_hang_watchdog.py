"""Hangs name the rank (issue 19 item 4), with ``sporch run --local`` on 4 gloo ranks of the tiny
preset: a rank that sleeps before its collective (fault injection, SPORCH_FAULT_HANG_*) ends the
job within the collective timeout + 30 s, ``sporch status`` names it and its node, and every
other rank's stack file shows the collective it waited in; a job still running at its time
limit (``resources.time``) ends there as TIMEOUT, as Slurm would end it.

Each run starts 4 rank processes that import torch (10-15 s on 2 busy cores); about 40 s each.
"""

from __future__ import annotations

import json
import re
import time

import pytest

from tests.runtime.launch.local_cli import TINY, hooks_env, sporch

TIMEOUT_S = 10

CASES = {
    # (overrides, the rank that sleeps, before which collective, the collective its peers wait in, their frame)
    "ulysses-all-to-all": (("parallel.ring=1", "parallel.ulysses=4"), 3, "all_to_all", "ulysses_qkv", "in qkv_in"),
    "ring-p2p": (("parallel.ring=4", "parallel.ulysses=1"), 1, "p2p", "ring_kv", "in ring_attention"),
}


def _run_id(proc) -> str:
    return re.search(r"id (tiny-\S+)", proc.stderr.replace("\n", " ")).group(1)


@pytest.mark.parametrize("case", sorted(CASES))
def test_a_rank_that_never_arrives_is_named_with_its_node(case, tmp_path):
    overrides, rank, before, collective, frame = CASES[case]
    run_dir, env = tmp_path / "run", {"SPORCH_HOME": str(tmp_path / "home"), "SPORCH_FAULT_HANG_RANK": str(rank),
                                      "SPORCH_FAULT_HANG_BEFORE": before, "COLUMNS": "400"}
    proc = sporch("run", "--local", "--cluster", "local", str(TINY), *overrides,
                  f"resources.collective_timeout={TIMEOUT_S}", "--run-dir", str(run_dir), env=env, timeout=200)
    ended = time.time()
    assert proc.returncode == 1, proc.stdout + proc.stderr
    records = {r: json.loads((run_dir / "hang" / f"rank{r}.json").read_text()) for r in range(4)}
    peers = [r for r in range(4) if r != rank]
    started = min(records[r]["collective"]["started"] for r in peers)
    assert ended - started < TIMEOUT_S + 30, f"ended {ended - started:.0f} s after the first rank entered"

    # every other rank's stacks show the collective it waited in
    for r in peers:
        assert records[r]["state"] == "timeout" and records[r]["collective"]["name"] == collective
        text = (run_dir / "hang" / f"rank{r}.txt").read_text()
        assert "timeout: waited" in text.splitlines()[1] and collective in text.splitlines()[1]
        assert frame in text, text  # faulthandler's frame inside the collective
    # the one that never arrived: no collective, its stack in the injected sleep
    assert records[rank]["state"] == "alerted" and records[rank]["collective"] is None
    assert "in _injected_hang" in (run_dir / "hang" / f"rank{rank}.txt").read_text()

    result = json.loads((run_dir / "result.json").read_text())
    expected = f"rank {rank} (local-node0) never arrived at {collective} ("
    assert result["failed_rank"] == rank and result["error"].startswith(expected), result["error"]
    assert result["hang"]["never_arrived"] == [rank] and result["hang"]["waited"] == peers
    assert expected in proc.stdout  # run's summary

    [st] = json.loads(sporch("status", "--json", _run_id(proc), env=env).stdout)
    assert st["state"] == "FAILED" and st["failed_rank"] == rank and st["error"].startswith(expected)
    assert expected in sporch("status", _run_id(proc), env=env).stdout  # the table


def test_the_time_limit_ends_a_local_run_as_timeout(tmp_path):
    """Every rank sleeps (no collective, so the watchdog has nothing to say): the runner ends
    the ranks at resources.time, as Slurm would, and the run is TIMEOUT; each rank's log ends
    with its stacks (SIGTERM)."""
    run_dir, env = tmp_path / "run", {**hooks_env(), "SPORCH_HOME": str(tmp_path / "home"), "SPORCH_SLEEP_S": "600"}
    start = time.monotonic()
    proc = sporch("run", "--local", "--cluster", "local", str(TINY), "entrypoint=examples.hooks:sleep",
                  "resources.time=00:00:40", "--run-dir", str(run_dir), env=env, timeout=200)
    took = time.monotonic() - start
    assert proc.returncode == 3, proc.stdout + proc.stderr
    assert 40 <= took < 40 + 30, took
    assert "TIMEOUT: the time limit resources.time=00:00:40 was reached" in proc.stderr
    state = json.loads((run_dir / "local.json").read_text())
    assert state["state"] == "TIMEOUT" and set(state["stopped"].values()) == {"limit"}
    [st] = json.loads(sporch("status", "--json", _run_id(proc), env=env).stdout)
    assert st["state"] == "TIMEOUT" and "time limit (00:00:40) was reached" in st["error"]
    for rank in range(4):
        assert "in sleep" in (run_dir / "logs" / f"rank{rank}.log").read_text()
