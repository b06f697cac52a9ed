"""Job records and lookups (no Slurm)."""

from __future__ import annotations

import datetime as dt
import json

import pytest

from sporch.orchestrator.errors import SporchError
from sporch.orchestrator.jobs import store
from sporch.orchestrator.jobs.store import JobRecord


def _rec(i: str, name: str, slurm_id: str, when: str, job_dir: str = "/nonexistent") -> JobRecord:
    return JobRecord(id=i, name=name, cluster="slurmlab", backend="sbatch", backend_job_id=slurm_id, job_dir=job_dir,
                     submitted=when, world_size=4, nodes=2,
                     logs={"batch_out": "logs/{job_id}.out", "rank_err": "logs/{job_id}_{rank}.err"})


def test_home_default_and_env(monkeypatch, tmp_path):
    monkeypatch.delenv("SPORCH_HOME", raising=False)
    assert str(store.sporch_home()).endswith(".local/share/sporch")
    monkeypatch.setenv("SPORCH_HOME", str(tmp_path))
    assert store.jobs_dir() == tmp_path / "jobs"


def test_save_writes_home_and_job_dir_copies(sporch_home, tmp_path):
    jd = tmp_path / "jd"
    jd.mkdir()
    r = _rec("tiny-20260101-000000", "tiny", "42", "2026-01-01T00:00:00", str(jd))
    path = store.save(r)
    assert path == sporch_home / "jobs" / "tiny-20260101-000000.json"
    assert json.loads(path.read_text())["backend_job_id"] == "42"
    assert store.load_file(jd / "record.json") == r
    assert store.load_all() == [r]


def test_find_by_id_slurm_id_name_prefix_and_dir(sporch_home, tmp_path):
    jd = tmp_path / "jd"
    jd.mkdir()
    a = _rec("tiny-20260101-000000", "tiny", "41", "2026-01-01T00:00:00")
    b = _rec("tiny-20260101-000001", "tiny", "42", "2026-01-01T00:00:01", str(jd))
    c = _rec("bench-20260101-000002", "bench", "43", "2026-01-01T00:00:02")
    for r in (a, b, c):
        store.save(r)
    assert store.find("tiny-20260101-000000").id == a.id
    assert store.find("41").id == a.id
    assert store.find("tiny").id == b.id  # the latest of that name
    assert store.find("bench-2026").id == c.id  # unique prefix
    assert store.find(str(jd)).id == b.id  # a job dir with record.json
    with pytest.raises(SporchError, match="ambiguous"):
        store.find("tiny-2026")
    with pytest.raises(SporchError, match=r"no job 'nope' known"):
        store.find("nope")


def test_unique_id_and_make_id(sporch_home):
    base = store.make_id("tiny", dt.datetime(2026, 1, 2, 3, 4, 5))
    assert base == "tiny-20260102-030405"
    store.save(_rec(base, "tiny", "1", "x"))
    assert store.unique_id(base) == base + "-2"
    store.save(_rec(base + "-2", "tiny", "2", "y"))
    assert store.unique_id(base) == base + "-3"


def test_log_paths(tmp_path):
    r = _rec("a", "a", "77", "t", str(tmp_path))
    assert r.log_path("batch_out") == tmp_path / "logs/77.out"
    assert r.log_path("rank_err", 3) == tmp_path / "logs/77_3.err"
    with pytest.raises(SporchError):
        r.log_path("rank_out", 1)


def test_unreadable_records_are_skipped(sporch_home):
    (sporch_home / "jobs").mkdir(parents=True)
    (sporch_home / "jobs" / "broken.json").write_text("{not json")
    store.save(_rec("ok", "ok", "5", "t"))
    assert [r.id for r in store.load_all()] == ["ok"]


def test_a_record_written_before_the_rename_still_loads(sporch_home, tmp_path):
    """``backend_job_id`` was ``slurm_job_id`` (it holds a pid for the local backend): an older
    record file loads with its id in the new field, and is written back under the new key."""
    jd = tmp_path / "jd"
    jd.mkdir()
    new = _rec("old-20250101-000000", "old", "4242", "2025-01-01T00:00:00", str(jd))
    old_doc = {("slurm_job_id" if k == "backend_job_id" else k): v for k, v in new.to_dict().items()}
    assert "backend_job_id" not in old_doc
    (sporch_home / "jobs").mkdir(parents=True, exist_ok=True)
    (sporch_home / "jobs" / f"{new.id}.json").write_text(json.dumps(old_doc))
    loaded = store.load_all()
    assert loaded == [new]
    assert store.find(new.id).log_path("batch_out") == jd / "logs" / "4242.out"
    store.save(loaded[0])
    doc = json.loads((sporch_home / "jobs" / f"{new.id}.json").read_text())
    assert doc["backend_job_id"] == "4242" and "slurm_job_id" not in doc
