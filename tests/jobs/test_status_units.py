"""status / wait / cancel logic with Slurm's answers faked (no Slurm)."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import pytest

from sporch.orchestrator.jobs import status as js
from sporch.orchestrator.jobs import store
from sporch.orchestrator.slurm.rows import SlurmRow
from sporch.orchestrator.jobs.store import JobRecord


def _rec(tmp_path: Path, i: str, slurm_id: str, completed: bool = False) -> JobRecord:
    """A record of a job in ``tmp_path/i``; ``completed``: its ranks wrote a completed result.json."""
    jd = tmp_path / i
    (jd / "logs").mkdir(parents=True)
    if completed:
        (jd / "result.json").write_text('{"status": "completed"}')
    r = JobRecord(id=i, name=i, cluster="lab", backend="sbatch", backend_job_id=slurm_id, job_dir=str(jd),
                  submitted=f"2026-01-01T00:00:0{slurm_id[-1]}", world_size=4, nodes=2,
                  logs={"batch_out": "logs/{job_id}.out", "batch_err": "logs/{job_id}.err",
                        "rank_out": "logs/{job_id}_{rank}.out", "rank_err": "logs/{job_id}_{rank}.err"})
    store.save(r)
    return r


FAKE_TOOL = """#!{python}
# A stand-in for squeue / sacct / scancel: answers from state.json in Slurm's own formats
# (the formats sporch asks for) and logs each call, so sporch runs its real commands.
import json, os, sys
here = os.path.dirname(os.path.abspath(__file__))
tool = os.path.basename(sys.argv[0])
state = json.load(open(os.path.join(here, "state.json")))
ids = [a.split("=", 1)[1].split(",") for a in sys.argv[1:] if a.startswith("--jobs=")]
ids = ids[0] if ids else [a for a in sys.argv[1:] if not a.startswith("-")]
with open(os.path.join(here, "calls.jsonl"), "a") as fh:
    fh.write(json.dumps([tool, ids]) + "\\n")
if tool == "squeue":
    rows = [[i] + state["squeue"][i] for i in ids if i in state["squeue"]]
    if not rows:
        sys.exit("slurm_load_jobs error: Invalid job id specified")
elif tool == "sacct":
    if not state["accounting"]:
        sys.exit("sacct: error: Slurm accounting storage is disabled")
    rows = [[i] + state["sacct"][i] for i in ids if i in state["sacct"]]
else:
    rows = []
for r in rows:
    print("|".join("" if v is None else str(v) for v in r))
"""


class FakeSlurm:
    """squeue, sacct and scancel on PATH that answer with the given rows: sporch's real
    LocalHost runs them and parses their output."""

    def __init__(self, squeue=None, sacct=None, accounting=True):
        self.squeue = dict(squeue or {})
        self.sacct = dict(sacct or {})
        self.accounting = accounting

    def install(self, monkeypatch, folder: Path):
        self.bin = folder / "fake-slurm-bin"
        self.bin.mkdir()
        for tool in ("squeue", "sacct", "scancel"):
            (self.bin / tool).write_text(FAKE_TOOL.format(python=sys.executable))
            (self.bin / tool).chmod(0o755)
        self._write()
        monkeypatch.setenv("PATH", f"{self.bin}{os.pathsep}{os.environ['PATH']}")
        return self

    def update(self, squeue=None, sacct=None):
        self.squeue.update(squeue or {})
        self.sacct.update(sacct or {})
        self._write()

    def _write(self):
        state = {"accounting": self.accounting,
                 "squeue": {i: [r.state, r.reason, r.elapsed, r.nodelist] for i, r in self.squeue.items()},
                 "sacct": {i: [r.state, r.exit_code, r.reason, r.elapsed, r.nodelist] for i, r in self.sacct.items()}}
        (self.bin / "state.json").write_text(json.dumps(state))

    @property
    def calls(self):
        log = self.bin / "calls.jsonl"
        return [tuple(json.loads(line)) for line in log.read_text().splitlines()] if log.exists() else []

    def clear(self):
        (self.bin / "calls.jsonl").unlink(missing_ok=True)


def test_one_squeue_and_one_sacct_call_per_poll(monkeypatch, tmp_path, sporch_home):
    a, b, c = _rec(tmp_path, "a", "11"), _rec(tmp_path, "b", "12"), _rec(tmp_path, "c", "13", completed=True)
    fake = FakeSlurm(squeue={"11": SlurmRow("RUNNING", elapsed="0:05", nodelist="node[1-2]"),
                             "12": SlurmRow("PENDING", reason="Resources")},
                     sacct={"13": SlurmRow("COMPLETED", exit_code="0:0", elapsed="00:00:09")}).install(monkeypatch, tmp_path)
    sts = js.poll([a, b, c])
    assert fake.calls == [("squeue", ["11", "12", "13"]), ("sacct", ["13"])]
    assert [(s.state, s.terminal, s.source) for s in sts] == [
        ("RUNNING", False, "squeue"), ("PENDING", False, "squeue"), ("COMPLETED", True, "sacct")]
    assert sts[0].nodelist == "node[1-2]" and sts[1].reason == "Resources"
    assert sts[2].exit_status() == 0
    # the final state is cached: the next poll does not ask about c again
    fake.clear()
    sts = js.poll(store.load_all())
    assert fake.calls == [("squeue", ["11", "12"])]
    assert sts[2].source == "record" and sts[2].state == "COMPLETED"


def test_failed_rank_from_result_json(monkeypatch, tmp_path, sporch_home):
    r = _rec(tmp_path, "f", "21")
    (Path(r.job_dir) / "result.json").write_text(json.dumps(
        {"status": "failed", "failed_rank": 2, "error": "ValueError: bad\nthing", "restart": 0}))
    FakeSlurm(squeue={"21": SlurmRow("FAILED")}).install(monkeypatch, tmp_path)
    [s] = js.poll([r])
    assert (s.state, s.failed_rank, s.error, s.exit_status()) == ("FAILED", 2, "ValueError: bad thing", 1)


def test_failed_rank_from_rank_files_skips_peer_errors(monkeypatch, tmp_path, sporch_home):
    r = _rec(tmp_path, "g", "22")
    ranks = Path(r.job_dir) / "ranks"
    ranks.mkdir()
    (ranks / "rank0.json").write_text(json.dumps(
        {"rank": 0, "status": "failed", "error": {"rank": 0, "error": "RuntimeError: Connection closed by peer"}}))
    (ranks / "rank3.json").write_text(json.dumps(
        {"rank": 3, "status": "failed", "error": {"rank": 3, "error": "RuntimeError: injected failure on rank 3"}}))
    (ranks / "rank1.json").write_text(json.dumps({"rank": 1, "status": "completed"}))
    FakeSlurm(sacct={"22": SlurmRow("FAILED", exit_code="1:0")}).install(monkeypatch, tmp_path)
    [s] = js.poll([r])
    assert (s.failed_rank, s.error) == (3, "RuntimeError: injected failure on rank 3")


def test_failed_rank_from_logs(monkeypatch, tmp_path, sporch_home):
    r = _rec(tmp_path, "h", "23")
    logs = Path(r.job_dir) / "logs"
    (logs / "23_0.err").write_text("warming up\n")
    (logs / "23_2.err").write_text("Traceback (most recent call last):\n  File x\nKeyError: 'latents'\n")
    FakeSlurm(squeue={"23": SlurmRow("FAILED")}).install(monkeypatch, tmp_path)
    [s] = js.poll([r])
    assert (s.failed_rank, s.error) == (2, "KeyError: 'latents'")


def test_no_accounting_falls_back_to_the_job_dir(monkeypatch, tmp_path, sporch_home):
    done, failed, gone, cancelled = (_rec(tmp_path, n, i) for n, i in
                                     (("d", "31"), ("x", "32"), ("y", "33"), ("z", "34")))
    (Path(done.job_dir) / "result.json").write_text(json.dumps({"status": "completed", "restart": 1}))
    (Path(failed.job_dir) / "result.json").write_text(json.dumps(
        {"status": "failed", "failed_rank": 1, "error": "boom"}))
    cancelled.cancelled = "2026-01-01T00:00:00"
    fake = FakeSlurm(accounting=False).install(monkeypatch, tmp_path)
    sts = {s.id: s for s in js.poll([done, failed, gone, cancelled])}
    assert fake.calls == [("squeue", ["31", "32", "33", "34"]), ("sacct", ["31", "32", "33", "34"])]
    assert (sts["d"].state, sts["d"].source, sts["d"].restart, sts["d"].exit_status()) == (
        "COMPLETED", "job dir", 1, 0)
    assert (sts["x"].state, sts["x"].failed_rank, sts["x"].error) == ("FAILED", 1, "boom")
    assert sts["y"].state == "FAILED" and "without a result" in sts["y"].reason
    assert sts["z"].state == "CANCELLED" and sts["z"].exit_status() == 3


@pytest.mark.parametrize("state,result,code", [("COMPLETED", None, 0), ("COMPLETED", "failed", 1),
                                               ("FAILED", None, 1), ("NODE_FAIL", None, 1),
                                               ("OUT_OF_MEMORY", None, 1), ("CANCELLED", None, 3),
                                               ("TIMEOUT", None, 3), ("PREEMPTED", None, 3)])
def test_exit_status(state, result, code):
    s = js.JobStatus(id="a", name="a", cluster="c", backend_job_id="1", state=state, terminal=True, source="sacct",
                     result_status=result)
    assert s.exit_status() == code


def test_wait_returns_the_jobs_code_and_times_out(monkeypatch, tmp_path, sporch_home, run_cli):
    _rec(tmp_path, "w", "41")
    fake = FakeSlurm(squeue={"41": SlurmRow("RUNNING")}).install(monkeypatch, tmp_path)
    code, out, err = run_cli("wait", "w", "--timeout", "0.3", "--interval", "0.1")
    assert code == 124 and "still RUNNING" in err
    fake.update(squeue={"41": SlurmRow("CANCELLED", elapsed="0:03")})
    code, out, err = run_cli("wait", "41", "--interval", "0.1")
    assert code == 3 and "w: CANCELLED" in out


def test_cancel_skips_finished_jobs(monkeypatch, tmp_path, sporch_home, run_cli):
    _rec(tmp_path, "live", "51")
    _rec(tmp_path, "done", "52", completed=True)
    fake = FakeSlurm(squeue={"51": SlurmRow("RUNNING"), "52": SlurmRow("COMPLETED")}).install(monkeypatch, tmp_path)
    code, out, err = run_cli("cancel", "live", "done")
    assert code == 0, err
    assert [c for c in fake.calls if c[0] == "scancel"] == [("scancel", ["51"])]
    assert "live: cancelled Slurm job 51 (was RUNNING)" in out
    assert "done: already COMPLETED" in out
    assert store.find("live").cancelled


def test_status_lists_jobs_and_json(monkeypatch, tmp_path, sporch_home, run_cli):
    _rec(tmp_path, "s1", "61")
    FakeSlurm(squeue={"61": SlurmRow("PENDING", reason="Priority")}).install(monkeypatch, tmp_path)
    code, out, err = run_cli("status")
    assert code == 0 and "s1" in out and "PENDING" in out
    code, out, err = run_cli("status", "--json", "61")
    assert json.loads(out)[0]["state"] == "PENDING"
    code, out, err = run_cli("status", "nope")
    assert code == 2 and err.startswith("sporch: error: no job 'nope' known")


def test_status_without_jobs(sporch_home, run_cli):
    code, out, err = run_cli("status")
    assert code == 0 and "no jobs known" in out


def test_logs_prints_batch_and_rank_logs(monkeypatch, tmp_path, sporch_home, run_cli):
    r = _rec(tmp_path, "l", "71", completed=True)
    logs = Path(r.job_dir) / "logs"
    (logs / "71.out").write_text("batch says hi\n")
    (logs / "71_1.out").write_text("rank one\n")
    code, out, err = run_cli("logs", "l")
    assert code == 0 and out == "batch says hi\n"
    code, out, err = run_cli("logs", "l", "--rank", "1", "--stream", "out")
    assert out == "rank one\n"
    code, out, err = run_cli("logs", "l", "--rank", "9")
    assert code == 2 and "ranks 0..3" in err
    code, out, err = run_cli("logs", "l", "--rank", "2")
    assert code == 2 and "no log yet" in err
    FakeSlurm(squeue={"71": SlurmRow("COMPLETED")}).install(monkeypatch, tmp_path)
    code, out, err = run_cli("logs", "l", "-f", "--interval", "0.1")
    assert code == 0 and out == "batch says hi\n" and "COMPLETED" in err


def test_a_completed_job_without_result_is_failed_with_the_batch_logs_reason(monkeypatch, tmp_path, sporch_home):
    """Slurm 22.05 says COMPLETED when srun could not start the ranks: without result.json the
    job is FAILED, with srun's error; a result that says failed makes it FAILED too."""
    bare = _rec(tmp_path, "bare", "81")
    (Path(bare.job_dir) / "logs" / "81.err").write_text("srun: error: Slurmd could not connect IO\n")
    quiet = _rec(tmp_path, "quiet", "82")
    told = _rec(tmp_path, "told", "83")
    (Path(told.job_dir) / "result.json").write_text('{"status": "failed", "failed_rank": 1, "error": "ValueError: x"}')
    FakeSlurm(sacct={i: SlurmRow("COMPLETED", exit_code="0:0") for i in ("81", "82", "83")}).install(monkeypatch,
                                                                                                  tmp_path)
    sts = {s.id: s for s in js.poll([bare, quiet, told])}
    assert sts["bare"].state == "FAILED" and sts["bare"].exit_status() == 1
    assert sts["bare"].reason == "finished without a result (no result.json): srun: error: Slurmd could not connect IO"
    assert sts["quiet"].state == "FAILED" and "no result.json" in sts["quiet"].reason
    assert sts["told"].state == "FAILED" and sts["told"].failed_rank == 1 and sts["told"].error == "ValueError: x"
    assert store.find("bare").final["state"] == "FAILED"


def test_a_rank_srun_reports_killed_is_blamed_before_its_peers(monkeypatch, tmp_path, sporch_home):
    """srun's batch log names the rank that was killed first; the peers' records say their
    connection broke: the killed rank (which wrote no record) is the cause."""
    r = _rec(tmp_path, "k", "91")
    (Path(r.job_dir) / "logs" / "91.err").write_text(
        "srun: error: node2: task 2: Killed\nsrun: error: node2: task 3: Terminated\n"
        "srun: error: node1: tasks 0-1: Terminated\n")
    ranks = Path(r.job_dir) / "ranks"
    ranks.mkdir()
    for rank in (0, 1, 3):
        (ranks / f"rank{rank}.json").write_text(json.dumps(
            {"rank": rank, "status": "failed", "error": {"rank": rank, "error": "RuntimeError: Connection reset by peer"}}))
    (Path(r.job_dir) / "result.json").write_text(json.dumps(
        {"status": "failed", "failed_rank": 0, "error": "RuntimeError: Connection reset by peer"}))
    FakeSlurm(sacct={"91": SlurmRow("FAILED", exit_code="1:0")}).install(monkeypatch, tmp_path)
    st = js.poll([r])[0]
    assert (st.failed_rank, st.error) == (2, "rank 2 died: killed by signal 9 (SIGKILL) on node2")


def test_a_local_run_that_says_completed_without_result_is_failed(tmp_path, sporch_home):
    jd = tmp_path / "loc"
    (jd / "logs").mkdir(parents=True)
    (jd / "logs" / "rank0.log").write_text("starting\nRuntimeError: the ranks could not start\n")
    (jd / "local.json").write_text('{"pid": 1, "state": "COMPLETED"}')
    r = JobRecord(id="loc", name="loc", cluster="local", backend="local", backend_job_id="1", job_dir=str(jd),
                  submitted="2026-01-01T00:00:00", world_size=1, nodes=1,
                  logs={"batch_out": "logs/rank0.log", "batch_err": "logs/rank0.log",
                        "rank_out": "logs/rank{rank}.log", "rank_err": "logs/rank{rank}.log"})
    store.save(r)
    st = js.poll([r])[0]
    assert st.state == "FAILED" and st.exit_status() == 1
    assert st.reason == "finished without a result (no result.json): RuntimeError: the ranks could not start"


def test_a_broken_result_json_is_a_one_line_reason_not_a_traceback(monkeypatch, tmp_path, sporch_home, run_cli):
    """result.json with a key the contract does not know: the job did not complete readably."""
    r = _rec(tmp_path, "bad", "95")
    (Path(r.job_dir) / "result.json").write_text('{"status": "completed", "colour": "red"}')
    garbled = _rec(tmp_path, "garbled", "96")
    (Path(garbled.job_dir) / "result.json").write_text('{"status": "comp')
    FakeSlurm(sacct={"95": SlurmRow("COMPLETED", exit_code="0:0"),
                     "96": SlurmRow("FAILED", exit_code="1:0")}).install(monkeypatch, tmp_path)
    code, out, err = run_cli("status", "--json", "bad", "garbled")
    assert code == 0 and "Traceback" not in out + err
    bad, garbled = json.loads(out)
    assert bad["state"] == "FAILED" and bad["result_status"] is None
    assert bad["reason"].startswith("finished without a readable result (") and "unknown key(s) colour" in bad["reason"]
    assert garbled["state"] == "FAILED" and "not valid JSON" in garbled["reason"]
    assert all("\n" not in s["reason"] for s in (bad, garbled))
