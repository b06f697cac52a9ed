"""A login host whose sshd goes away for a while (issue 9 item 7): status polls over ssh are
retried until it is back, and a connection lost mid-session reads as "unreachable", never as a
missing result file."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from sporch.orchestrator.errors import Unreachable
from sporch.orchestrator.jobs.retry import retry_unreachable
from sporch.orchestrator.jobs.status import poll
from sporch.orchestrator.jobs.store import JobRecord
from sporch.orchestrator.remote.pool import close_all
from .helpers import descendants

SSHD = "/usr/sbin/sshd"
SQUEUE = f"#!{sys.executable}\nprint('88|COMPLETED|None|0:09|node1')\n"


class OwnSshd:
    """A second sshd with the fixture's keys on a port of its own, to stop and start."""

    def __init__(self, base, folder: Path) -> None:
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            self.port = s.getsockname()[1]
        text = (base.folder / "sshd_config").read_text()
        text = "\n".join(f"Port {self.port}" if ln.startswith("Port ") else
                         f"PidFile {folder}/own.pid" if ln.startswith("PidFile ") else ln for ln in text.splitlines())
        self.config = folder / "own_sshd_config"
        self.config.write_text(text + "\n")
        self.proc = None

    def start(self) -> None:
        self.proc = subprocess.Popen([SSHD, "-D", "-e", "-f", str(self.config)], stdout=subprocess.DEVNULL,
                                     stderr=subprocess.DEVNULL, start_new_session=True)
        deadline = time.monotonic() + 15
        while time.monotonic() < deadline:
            try:
                with socket.create_connection(("127.0.0.1", self.port), timeout=1) as s:
                    if s.recv(64).startswith(b"SSH-"):
                        return
            except OSError:
                time.sleep(0.1)
        raise AssertionError("own sshd did not start")

    def stop(self) -> None:
        """Drop everything: the listener and every session it serves (its descendants)."""
        for pid in [*descendants(self.proc.pid), self.proc.pid]:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        self.proc.wait(timeout=10)



@pytest.fixture
def own_sshd(sshd, tmp_path):
    own = OwnSshd(sshd, tmp_path)
    own.start()
    yield own
    own.stop()
    close_all()


def _record(sshd, own, tmp_path: Path) -> JobRecord:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "squeue").write_text(SQUEUE)
    (bin_dir / "squeue").chmod(0o755)
    jd = tmp_path / "job"
    (jd / "logs").mkdir(parents=True)
    (jd / "result.json").write_text('{"status": "completed"}')
    login = sshd.login(str(tmp_path / "kh"), port=own.port, setup=[f"export PATH={bin_dir}:$PATH"],
                       workdir=None)
    return JobRecord(id="r", name="r", cluster="lab", backend="sbatch", backend_job_id="88", job_dir=str(jd),
                     submitted="2026-01-01T00:00:00", world_size=1, nodes=1, remote=login,
                     logs={"batch_err": "logs/{job_id}.err"})


def test_status_over_ssh_rides_out_a_dropped_sshd(sshd, own_sshd, tmp_path):
    rec = _record(sshd, own_sshd, tmp_path)
    assert poll([rec], save=False)[0].state == "COMPLETED"  # connected and pooled
    own_sshd.stop()  # sshd and the session are gone
    with pytest.raises(Unreachable, match=r"^(cannot reach|lost the connection to)"):
        poll([rec], save=False)
    restart = threading.Timer(3.0, own_sshd.start)
    restart.start()
    retries = []
    try:
        st = retry_unreachable(lambda: poll([rec], save=False)[0], grace_s=60,
                               on_retry=lambda e, pause, left: retries.append(str(e)))
    finally:
        restart.join()
    assert st.state == "COMPLETED" and st.result_status == "completed"
    assert retries and all("127.0.0.1" in r for r in retries)
