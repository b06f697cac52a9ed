"""Issue 32 item 4: the tests never write into the user's own sporch store. tests/conftest.py's
session fixture points SPORCH_HOME at a temporary folder (SPORCH_HISTORY unset, so the history
store goes there too) and fails the run when the real store's listing changed."""

from __future__ import annotations

import datetime as _dt
import os
import subprocess
import sys
from pathlib import Path

from sporch.orchestrator.campaign.history_store import store_path
from sporch.orchestrator.jobs import store
from sporch.orchestrator.jobs.store import JobRecord, sporch_home
from tests.conftest import real_store_paths, store_snapshot
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
