"""One runner per campaign directory: an advisory ``flock`` on ``<dir>/.lock``.

The holder writes who it is (pid, host, command) into the file; a second runner reads that
and stops with one line naming the holder. The kernel drops the lock when the holder's process
ends (even when killed), so a stale file never blocks: only a live holder does. The file is
never deleted (deleting a lock file races with a runner that just opened it).
"""

from __future__ import annotations

import fcntl
import json
import os
import socket
import stat
from pathlib import Path
from typing import Optional, Sequence

from sporch.orchestrator.errors import SporchError


class CampaignBusy(SporchError):
    """Another runner holds the campaign directory (exit 2, like other refused requests)."""


class CampaignLock:
    def __init__(self, path: Path, command: Sequence[str] = ()) -> None:
        self.path = Path(path)
        self.command = list(command)
        self._fh = None

    def acquire(self) -> "CampaignLock":
        fh = self._open()
        try:
            fcntl.flock(fh.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            fh.seek(0)
            holder = describe(fh.read())
            fh.close()
            raise CampaignBusy(f"campaign directory {self.path.parent} is in use by {holder}; wait for it to end "
                               "(or stop that process) and run again") from None
        fh.seek(0)
        fh.truncate()
        fh.write(json.dumps({"pid": os.getpid(), "host": socket.gethostname(), "command": self.command}) + "\n")
        fh.flush()
        self._fh = fh
        return self

    def _open(self):
        """The lock file, opened for reading and appending; something else in its place (a
        folder, a FIFO, a device) is a one-line SporchError."""
        fix = f"{self.path} is not a regular file; remove it (sporch makes a new lock file)"
        try:
            fd = os.open(self.path, os.O_RDWR | os.O_APPEND | os.O_CREAT | os.O_NONBLOCK, 0o644)
        except IsADirectoryError:
            raise SporchError(fix) from None
        except OSError as exc:
            raise SporchError(f"cannot open the lock file {self.path} ({exc.strerror or exc})") from None
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            os.close(fd)
            raise SporchError(fix)
        os.set_blocking(fd, True)
        return os.fdopen(fd, "a+", encoding="utf-8", errors="replace")

    def release(self) -> None:
        if self._fh is not None:
            fcntl.flock(self._fh.fileno(), fcntl.LOCK_UN)
            self._fh.close()
            self._fh = None

    def __enter__(self) -> "CampaignLock":
        return self.acquire()

    def __exit__(self, *exc) -> None:
        self.release()


def describe(text: str) -> str:
    """``pid 123 on host h (sporch campaign run x.yaml)`` from the lock file's text."""
    try:
        info: Optional[dict] = json.loads(text)
    except ValueError:
        info = None
    if not isinstance(info, dict):
        return "another process"
    command = " ".join(str(c) for c in info.get("command") or [])
    return f"pid {info.get('pid')} on host {info.get('host')}" + (f" ({command})" if command else "")
