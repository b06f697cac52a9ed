"""Issue 24 item 5: a local run's ranks die with their supervisor (PR_SET_PDEATHSIG), and a run
does not start in a folder where a previous run's ranks are alive (they hold its ranks lock).

The ranks here are stand-ins (a "python" that sleeps): no torch, seconds each.
"""

from __future__ import annotations

import fcntl
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from sporch.orchestrator.errors import SporchError
from sporch.orchestrator.submit.local_run import LocalRun, supervise

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="PR_SET_PDEATHSIG is Linux's")

PLAN = {"world_size": 2, "nodes": 1, "cluster": {"name": "t"},
        "ranks": [{"node": 0, "local_rank": 0}, {"node": 0, "local_rank": 1}]}


def sleeper(folder: Path) -> Path:
    """A stand-in interpreter: every rank sleeps."""
    path = folder / "fake-python"
    path.write_text("#!/bin/sh\nexec sleep 300\n")
    path.chmod(0o755)
    return path


def plan_file(folder: Path) -> Path:
    path = folder / "plan.json"
    path.write_text(json.dumps(PLAN))
    return path


def alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii") as fh:
            return fh.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def wait_for(predicate, timeout: float = 20.0):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(0.1)
    return predicate()


def children(pid: int) -> list[int]:
    try:
        return [int(c) for c in Path(f"/proc/{pid}/task/{pid}/children").read_text().split()]
    except OSError:
        return []


def test_ranks_die_when_the_supervisor_is_sigkilled(tmp_path):
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    code = ("import sys; from pathlib import Path; from sporch.orchestrator.submit.local_run import LocalRun; "
            "LocalRun(Path(sys.argv[1]), Path(sys.argv[2]), python=sys.argv[3]).start().wait()")
    sup = subprocess.Popen([sys.executable, "-c", code, str(plan_file(tmp_path)), str(run_dir), str(sleeper(tmp_path))])
    try:
        ranks = wait_for(lambda: len(children(sup.pid)) == 2 and children(sup.pid))
        assert ranks and len(ranks) == 2
        sup.send_signal(signal.SIGKILL)
        sup.wait()
        assert wait_for(lambda: not any(alive(r) for r in ranks)), "ranks outlived their supervisor"
    finally:
        sup.kill()
        for r in children(sup.pid):
            os.kill(r, signal.SIGKILL)


def test_a_run_refuses_a_folder_whose_previous_ranks_are_alive(tmp_path):
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    # a previous run's rank: it holds the folder's ranks lock (inherited from its supervisor, now gone)
    fd = os.open(run_dir / ".ranks.lock", os.O_RDWR | os.O_CREAT, 0o644)
    fcntl.flock(fd, fcntl.LOCK_EX)
    old_rank = subprocess.Popen(["sleep", "300"], pass_fds=(fd,))
    os.close(fd)
    try:
        with pytest.raises(SporchError) as e:
            supervise(plan_file(tmp_path), run_dir)
        assert "still alive" in str(e.value) and "\n" not in str(e.value)
        assert not (run_dir / "local.json").exists()  # nothing says RUNNING
        with pytest.raises(SporchError, match="still alive"):
            LocalRun(plan_file(tmp_path), run_dir, python=str(sleeper(tmp_path))).start()
    finally:
        old_rank.kill()
        old_rank.wait()
    # once it has ended, the folder runs again (and the lock is given back when the ranks end)
    run = LocalRun(plan_file(tmp_path), run_dir, python=str(sleeper(tmp_path))).start()
    run.kill()
    again = LocalRun(plan_file(tmp_path), run_dir, python=str(sleeper(tmp_path))).start()
    again.kill()


def test_the_cli_refuses_with_one_line(tmp_path):
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    fd = os.open(run_dir / ".ranks.lock", os.O_RDWR | os.O_CREAT, 0o644)
    fcntl.flock(fd, fcntl.LOCK_EX)
    try:
        p = subprocess.run([sys.executable, "-m", "sporch.orchestrator.submit.local_run", str(plan_file(tmp_path)),
                            str(run_dir)], capture_output=True, text=True, timeout=60)
    finally:
        os.close(fd)
    assert p.returncode == 2 and "still alive" in p.stderr and len(p.stderr.strip().splitlines()) == 1, p.stderr
