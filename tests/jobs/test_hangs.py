"""Hung collectives, orchestrator side (issue 19 item 4): the collective timeout, the diagnosis
of the watchdog's records, and what ``sporch status`` makes of them for a Slurm job (no Slurm,
no torch: the records are written here as the ranks would)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from sporch.orchestrator.config.job import job_from_dict
from sporch.orchestrator.hangs import (collective_timeout_s, diagnose, parse_record, pg_timeout_s,
                                                ranks_text)
from sporch.orchestrator.errors import SporchError
from sporch.orchestrator.jobs import status as js
from sporch.orchestrator.jobs.diagnosis import hang_diagnosis, job_dir_failure
from sporch.orchestrator.slurm.rows import SlurmRow
from tests.jobs.test_status_units import _rec

A2A = {"name": "ulysses_qkv", "kind": "all_to_all", "group": "ulysses", "ranks": [0, 1, 2, 3], "seq": 17,
       "layer": 3, "step": 2}


def _record(rank: int, state: str, collective: dict | None, **extra) -> dict:
    rec = {"rank": rank, "host": f"node{rank // 2 + 1}", "node": rank // 2, "pid": 100 + rank, "time": 1000.0,
           "timeout_s": 20.0, "state": state, "collective": collective,
           "last": {**A2A, "name": "ulysses_out", "seq": 16}, "entered": 40, "at": "hooks.py:9 in nap",
           "stack": f"rank{rank}.txt", "schema_version": 1}
    rec.update(extra)
    return rec


def _waiting(rank: int, state: str = "timeout", started: float = 900.0) -> dict:
    return _record(rank, state, {**A2A, "started": started + rank, "waited_s": 21.0 - rank})


def test_collective_timeout_defaults_below_the_time_limit():
    assert collective_timeout_s(None, "01:00:00") == 300.0
    assert collective_timeout_s(None, "00:10:00") == 150.0  # a quarter of the limit
    assert collective_timeout_s(None, None) == 300.0
    assert collective_timeout_s(45, "01:00:00") == 45.0
    assert collective_timeout_s(3000, "01:00:00") == 1800.0  # never more than half the limit
    assert pg_timeout_s(300.0) == 360  # the process group gives up after the watchdog


def test_the_job_key_must_be_below_the_time_limit():
    base = {"workload": {"seq_len": 64}, "resources": {"time": "00:01:00"}}
    assert job_from_dict({**base, "resources": {"time": "00:01:00", "collective_timeout": 20}}).resources \
        .collective_timeout == 20
    with pytest.raises(SporchError, match="'resources.collective_timeout' 60 s is not below the time limit"):
        job_from_dict({**base, "resources": {"time": "00:01:00", "collective_timeout": 60}})
    with pytest.raises(SporchError, match="must be a number of seconds > 0"):
        job_from_dict({**base, "resources": {"collective_timeout": 0}})


def test_ranks_text():
    assert ranks_text([0, 1, 2, 5, 7, 8]) == "0-2,5,7,8"
    assert ranks_text([3]) == "3"


def test_diagnose_names_the_rank_that_never_arrived_and_where_it_was():
    records = {r: _waiting(r) for r in range(3)}
    records[3] = _record(3, "alerted", None)
    d = diagnose(records)
    assert d.failed_rank == 3 and d.never_arrived == [3] and d.waited == [0, 1, 2]
    assert d.nodes == {"3": "node2"}
    assert d.line == ("rank 3 (node2) never arrived at ulysses_qkv (all_to_all, collective #17 of ulysses group "
                      "[0-3], layer 3, step 2): ranks 0-2 waited 21 s; rank 3 was in no collective (after "
                      "ulysses_out #16) at hooks.py:9 in nap; stacks in hang/")


def test_diagnose_without_the_missing_ranks_record_uses_the_hosts_given():
    d = diagnose({r: _waiting(r) for r in (0, 1, 3)}, hosts={2: "node2"})
    assert d.failed_rank == 2 and "rank 2 (node2) never arrived" in d.line
    assert "rank 2 wrote no stack" in d.line


def test_diagnose_a_rank_in_another_collective_and_a_collective_nobody_missed():
    records = {r: _waiting(r) for r in range(3)}
    records[3] = _record(3, "alerted", {**A2A, "name": "gather_sequence", "kind": "all_gather", "seq": 18,
                                        "started": 950.0, "waited_s": 5.0})
    assert "rank 3 was in gather_sequence (all_gather, collective #18" in diagnose(records).line
    records[3]["collective"]["seq"] = 17  # the same number, another collective: out of step
    assert diagnose(records).never_arrived == [3]
    everyone = diagnose({r: _waiting(r) for r in range(4)})
    assert everyone.failed_rank is None and "although ranks 0-3 all entered it" in everyone.line
    assert diagnose({0: _record(0, "alerted", None)}) is None  # nobody timed out: nothing to say


def test_parse_record_refuses_what_is_not_one():
    assert parse_record(json.dumps(_waiting(0)))["rank"] == 0
    for bad in ("{", "[]", json.dumps({"rank": "0", "state": "timeout"}), json.dumps({"rank": 0, "state": "odd"}),
                json.dumps({**_waiting(0), "collective": {"ranks": "0-3"}})):
        assert parse_record(bad) is None


def _hang_dir(job_dir: Path, records: dict) -> None:
    (job_dir / "hang").mkdir(parents=True, exist_ok=True)
    for rank, rec in records.items():
        (job_dir / "hang" / f"rank{rank}.json").write_text(json.dumps(rec))
        (job_dir / "hang" / f"rank{rank}.txt").write_text("stacks\n")
    (job_dir / "hang" / "rank9.json").write_text("{broken")  # left out, the others still tell


def test_status_of_a_slurm_job_names_the_rank_from_the_hang_folder(monkeypatch, tmp_path, sporch_home):
    """rank 0 could not write result.json: the watchdog's records still name rank 3, ahead of
    srun's report of the ranks the watchdog ended (exit code 4) and of their own timeout errors."""
    rec = _rec(tmp_path, "hung", "9001")
    jd = Path(rec.job_dir)
    _hang_dir(jd, {**{r: _waiting(r) for r in range(3)}, 3: _record(3, "alerted", None)})
    (jd / "logs" / "9001.err").write_text("srun: error: node1: tasks 0-1: Exited with exit code 4\n")
    monkeypatch.setattr(js, "slurm_query", lambda ids, host: ({"9001": SlurmRow("FAILED", exit_code="4:0")},
                                                               {"9001": "sacct"}, True))
    [st] = js.poll([rec])
    assert st.state == "FAILED" and st.failed_rank == 3
    assert st.error.startswith("rank 3 (node2) never arrived at ulysses_qkv")
    assert hang_diagnosis(str(jd)).never_arrived == [3]
    assert job_dir_failure(str(jd)).startswith("rank 3: rank 3 (node2) never arrived")


def test_status_prefers_rank_0s_diagnosis_over_srun_deaths(monkeypatch, tmp_path, sporch_home):
    rec = _rec(tmp_path, "hung0", "9002")
    jd = Path(rec.job_dir)
    line = "rank 3 (node2) never arrived at ulysses_qkv (...): ranks 0-2 waited 21 s; stacks in hang/"
    (jd / "result.json").write_text(json.dumps({"status": "failed", "failed_rank": 3, "error": line,
                                                "hang": {"line": line, "failed_rank": 3, "never_arrived": [3]}}))
    (jd / "logs" / "9002.err").write_text("srun: error: node2: task 3: Killed\n")  # no record of its own
    monkeypatch.setattr(js, "slurm_query", lambda ids, host: ({"9002": SlurmRow("FAILED", exit_code="4:0")},
                                                               {"9002": "sacct"}, True))
    [st] = js.poll([rec])
    assert (st.failed_rank, st.error) == (3, line)
