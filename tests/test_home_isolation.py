"""Issue 32 item 4: the tests never write into the user's own sporch store. tests/conftest.py's
session fixture points SPORCH_HOME at a temporary folder (SPORCH_HISTORY unset, so the history
store goes there too) and fails the run when the run wrote into the real store; what other
processes write there meanwhile (a second terminal, a cron job) does not fail it (issue 51 D)."""

from __future__ import annotations

import datetime as _dt
import os
import subprocess
import sys
import textwrap
from pathlib import Path

from sporch.orchestrator.campaign.history_store import store_path
from sporch.orchestrator.jobs import store
from sporch.orchestrator.jobs.store import JobRecord, sporch_home
from tests.conftest import changes_by_run, real_store_paths, store_snapshot
from tests.testutil import ROOT


def _under_temp(path: Path, real: list) -> bool:
    return not any(path == r or r in path.parents for r in real)


def test_sporch_writes_into_a_temporary_home(_no_user_store, tmp_path_factory):
    real = _no_user_store  # the real store paths, computed before the fixture changed anything
    default = Path("~/.local/share/sporch").expanduser()
    assert sporch_home() != default and _under_temp(sporch_home(), real + [default])
    assert store_path() is not None and _under_temp(store_path(), real + [default])
    assert Path(os.environ["SPORCH_HOME"]).is_relative_to(tmp_path_factory.getbasetemp())
    # a record saved by sporch's own code lands there, and so does a subprocess's
    rec = JobRecord(id="isolation-check", name="isolation-check", cluster="local", backend="local",
                    backend_job_id="1", job_dir=str(tmp_path_factory.mktemp("job")),
                    submitted=_dt.datetime(2026, 1, 1).isoformat(), command=[], world_size=1, nodes=1,
                    workload="verify", logs={})
    path = store.save_new(rec)
    assert path.is_file() and _under_temp(path, real + [default])
    child = subprocess.run([sys.executable, "-c", "from sporch.orchestrator.jobs.store import sporch_home; "
                            "print(sporch_home())"], capture_output=True, text=True, cwd=ROOT, timeout=60)
    assert Path(child.stdout.strip()) == sporch_home()


def test_the_store_check_sees_a_new_record(tmp_path):
    """The session check compares listings: a record written into a store changes it."""
    home = tmp_path / "home"
    env = {"HOME": str(tmp_path), "SPORCH_HISTORY": str(tmp_path / "h.sqlite")}
    assert real_store_paths(env) == [tmp_path / ".local/share/sporch", tmp_path / "h.sqlite"]
    assert real_store_paths({"SPORCH_HOME": str(home), "SPORCH_HISTORY": "off"}) == [home]
    before = store_snapshot([home])
    (home / "jobs").mkdir(parents=True)
    (home / "jobs" / "x.json").write_text("{}")
    after = store_snapshot([home])
    assert before != after and str(home / "jobs" / "x.json") in after


def test_changes_by_run_tells_the_runs_files_from_other_processes(tmp_path):
    store_dir = tmp_path / "store"
    (store_dir / "jobs").mkdir(parents=True)
    (store_dir / "jobs" / "old.json").write_text('{"job_dir": "/home/u/runs/a"}')
    (store_dir / "jobs" / "gone.json").write_text("{}")
    before = store_snapshot([store_dir])
    (store_dir / "jobs" / "ours.json").write_text('{"job_dir": "/tmp/pytest-of-u/pytest-7/test_x0/run"}')
    (store_dir / "jobs" / "theirs.json").write_text('{"job_dir": "/home/u/runs/b"}')
    (store_dir / "jobs" / "old.json").write_text('{"job_dir": "/home/u/runs/a", "final": {}}')
    (store_dir / "jobs" / "gone.json").unlink()
    ours, others = changes_by_run(before, store_snapshot([store_dir]), ["/tmp/pytest-of-u/pytest-7"])
    assert ours == [str(store_dir / "jobs" / "ours.json")]
    assert others == [str(store_dir / "jobs" / f"{n}.json") for n in ("gone", "old", "theirs")]


#: A second sporch process of the same user: writes a job record into the real store (HOME's) every
#: 50 ms, its job folders outside the test run's temporary root.
WRITER = """
import datetime, sys, time
from sporch.orchestrator.jobs import store
from sporch.orchestrator.jobs.store import JobRecord
for i in range(100000):
    store.save_new(JobRecord(id=f"other-{i}", name="other", cluster="local", backend="local", backend_job_id="1",
                             job_dir=f"{sys.argv[1]}/job{i}", submitted=datetime.datetime.now().isoformat(),
                             command=["sporch", "run"], world_size=1, nodes=1, workload="verify", logs={}))
    time.sleep(0.05)
"""

#: The inner run's tests: one waits until the other process has written twice during the run; one
#: (selected with -k) writes into the real store itself, from a subprocess that lost SPORCH_HOME.
INNER = """
import os, subprocess, sys, time
from pathlib import Path

def test_waits_while_another_process_writes():
    jobs = Path(os.environ["HOME"]) / ".local/share/sporch/jobs"
    seen = set(jobs.glob("*.json"))
    deadline = time.monotonic() + 120
    while len(set(jobs.glob("*.json")) - seen) < 2:
        assert time.monotonic() < deadline, "the other process wrote nothing"
        time.sleep(0.05)

def test_writes_into_the_real_store(tmp_path):
    env = {k: v for k, v in os.environ.items() if k != "SPORCH_HOME"}
    code = ("import sys; from sporch.orchestrator.jobs import store; from sporch.orchestrator.jobs.store import "
            "JobRecord; store.save_new(JobRecord(id='mine', name='mine', cluster='local', backend='local', "
            "backend_job_id='1', job_dir=sys.argv[1], submitted='2026-01-01T00:00:00'))")
    subprocess.run([sys.executable, "-c", code, str(tmp_path / "job")], env=env, check=True, timeout=120)
"""


def _inner_run(tmp_path: Path, select: str) -> subprocess.CompletedProcess:
    """A test session of its own (tests/conftest.py as a plugin) in a user account whose home is
    ``tmp_path/home``, while a second process writes job records into that user's real store."""
    folder = tmp_path / "inner"
    folder.mkdir()
    (folder / "test_inner.py").write_text(textwrap.dedent(INNER))
    (folder / "pytest.ini").write_text("[pytest]\n")
    env = {k: v for k, v in os.environ.items() if k not in ("SPORCH_HOME", "SPORCH_HISTORY")}
    env["HOME"] = str(tmp_path / "home")
    writer = subprocess.Popen([sys.executable, "-c", WRITER, str(tmp_path / "other-terminal")], cwd=ROOT, env=env)
    try:
        return subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "tests.conftest", "-p", "no:cacheprovider",
                               "-p", "no:randomly", "-c", str(folder / "pytest.ini"), "--rootdir", str(folder),
                               "--basetemp", str(tmp_path / "base"), "-k", select, str(folder / "test_inner.py")],
                              cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
    finally:
        writer.kill()
        writer.wait(30)


def test_the_session_check_passes_while_another_process_writes_records(tmp_path):
    """Before issue 51 D the check compared the whole listing and failed this run."""
    inner = _inner_run(tmp_path, "waits")
    assert inner.returncode == 0, inner.stdout + inner.stderr
    assert "note: other processes changed the user's sporch store" in inner.stdout


def test_the_session_check_still_fails_when_the_run_writes_into_the_real_store(tmp_path):
    inner = _inner_run(tmp_path, "writes")
    assert inner.returncode != 0, inner.stdout + inner.stderr
    mine = tmp_path / "home" / ".local/share/sporch/jobs/mine.json"
    assert f"the tests changed the user's own sporch store: {mine}" in inner.stdout, inner.stdout
