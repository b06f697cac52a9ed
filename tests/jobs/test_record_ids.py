"""Job records under concurrency and corruption (issue 9, items 9 and 12): no Slurm."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time

from sporch.orchestrator.jobs import store
from sporch.orchestrator.jobs.store import JobRecord

#: One process: wait for the common start time, then save a record whose wanted id is the same
#: in every process (as 20 submissions of one job name in the same second have).
SAVER = """
import sys, time
from sporch.orchestrator.jobs import store
from sporch.orchestrator.jobs.store import JobRecord
start, slurm_id = float(sys.argv[1]), sys.argv[2]
while time.time() < start:
    time.sleep(0.001)
rec = JobRecord(id="tiny-20260101-000000", name="tiny", cluster="slurmlab", backend="sbatch",
                backend_job_id=slurm_id, job_dir="/nonexistent", submitted="2026-01-01T00:00:00")
store.save_new(rec)
print(rec.id)
"""


def test_twenty_processes_saving_at_once_keep_every_record(sporch_home):
    env = {**os.environ, "SPORCH_HOME": str(sporch_home)}
    start = time.time() + 3.0  # after every interpreter has started
    procs = [subprocess.Popen([sys.executable, "-c", SAVER, str(start), str(1000 + i)], env=env,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for i in range(20)]
    outs = [p.communicate(timeout=120) for p in procs]
    assert all(p.returncode == 0 for p in procs), [err for _, err in outs]
    ids = [out.strip() for out, _ in outs]
    assert len(set(ids)) == 20  # every process got its own id
    recs = store.load_all()
    assert sorted(r.backend_job_id for r in recs) == [str(1000 + i) for i in range(20)]
    assert sorted(r.id for r in recs) == sorted(ids)
    assert not [p for p in (sporch_home / "jobs").iterdir() if not p.name.endswith(".json")]  # no leftovers


def test_status_all_reports_a_corrupt_record_and_lists_the_rest(sporch_home, run_cli):
    good = JobRecord(id="tiny-20260101-000000", name="tiny", cluster="slurmlab", backend="sbatch",
                     backend_job_id="1", job_dir="/nonexistent", submitted="2026-01-01T00:00:00",
                     final={"state": "COMPLETED", "exit_code": "0:0"})
    store.save(good, job_dir_copy=False)
    jobs = sporch_home / "jobs"
    (jobs / "list-20260101-000001.json").write_text("[1, 2]")
    (jobs / "types-20260101-000002.json").write_text(json.dumps({**good.to_dict(), "id": 5}))
    (jobs / "bytes-20260101-000003.json").write_bytes(b"\xff\xfe{")
    code, out, err = run_cli("status", "--all")
    assert code == 0, err
    assert "tiny-20260101-000000" in out
    for name in ("list-20260101-000001", "types-20260101-000002", "bytes-20260101-000003"):
        assert f"unreadable job record {jobs / name}.json" in err
    assert "Traceback" not in err and "internal error" not in err
    code, out, err = run_cli("status", "--all", "--json")
    assert code == 0 and [s["id"] for s in json.loads(out)] == ["tiny-20260101-000000"]
