"""One runner per campaign directory: an advisory ``flock`` on ``<dir>/.lock``.

The holder writes who it is (pid, host, command) into the file; a second runner reads that
and stops with one line naming the holder. The kernel drops the lock when the holder's process
ends (even when killed), so a stale file never blocks: only a live holder does. The file is
never deleted (deleting a lock file races with a runner that just opened it).

``campaign status`` never takes ``.lock``: the state file has a second lock, ``.state.lock``,
that a runner holds shared for its whole life (taken after ``.lock``, waiting for a status that
is saving) and a status tries exclusively without waiting (:func:`try_state_lock`). A status
that gets it saves ``state.json``; one that does not (a runner is on) only reads. So a status
can make a starting runner wait for its save, never refuse it.

Both files are opened without following a symbolic link (:mod:`sporch.orchestrator.safe_files`).
"""

from __future__ import annotations

import fcntl
import json
import os
import socket
from pathlib import Path
from typing import Optional, Sequence

from sporch.orchestrator.safe_files import open_nofollow
from sporch.orchestrator.errors import SporchError

STATE_LOCK_FILE = ".state.lock"


class CampaignBusy(SporchError):
    """Another runner holds the campaign directory (exit 2, like other refused requests)."""


class CampaignLock:
    def __init__(self, path: Path, command: Sequence[str] = ()) -> None:
        self.path = Path(path)
        self.command = list(command)
        self._fh = None
        self._state_fh = None

    def acquire(self) -> "CampaignLock":
        fh = _open(self.path)
        try:
            fcntl.flock(fh.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            fh.seek(0)
            holder = describe(fh.read())
            fh.close()
            raise CampaignBusy(f"campaign directory {self.path.parent} is in use by {holder}; wait for it to end "
                               "(or stop that process) and run again") from None
        try:
            fh.seek(0)
            fh.truncate()
            fh.write(json.dumps({"pid": os.getpid(), "host": socket.gethostname(), "command": self.command}) + "\n")
            fh.flush()
            state_fh = _open(self.path.with_name(STATE_LOCK_FILE))
        except BaseException:
            fh.close()
            raise
        fcntl.flock(state_fh.fileno(), fcntl.LOCK_SH)  # waits only for a status saving the state
        self._fh, self._state_fh = fh, state_fh
        return self

    def release(self) -> None:
        for name in ("_state_fh", "_fh"):
            fh = getattr(self, name)
            if fh is not None:
                fcntl.flock(fh.fileno(), fcntl.LOCK_UN)
                fh.close()
                setattr(self, name, None)

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


class StateLock:
    """The state file's exclusive lock, held by a status that saves ``state.json``."""

    def __init__(self, fh) -> None:
        self._fh = fh

    def release(self) -> None:
        if self._fh is not None:
            fcntl.flock(self._fh.fileno(), fcntl.LOCK_UN)
            self._fh.close()
            self._fh = None


def try_state_lock(directory: Path) -> Optional[StateLock]:
    """The state lock of campaign ``directory`` when no runner (and no other status) holds it,
    else None; never waits and never touches the runner's ``.lock``."""
    try:
        fh = _open(Path(directory) / STATE_LOCK_FILE)
    except PermissionError:  # a folder this user may only read: read-only status
        return None
    try:
        fcntl.flock(fh.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        fh.close()
        return None
    return StateLock(fh)


def _open(path: Path):
    """A lock file opened for reading and writing, created when missing, never through a link;
    a folder, FIFO or device in its place is one line (UnsafeFileError or SporchError)."""
    try:
        fd = open_nofollow(path, os.O_RDWR | os.O_CREAT | os.O_NONBLOCK, 0o644)
    except IsADirectoryError:
        raise SporchError(f"{path} is not a regular file; remove it (sporch makes a new lock file)") from None
    except OSError as exc:
        raise SporchError(f"cannot open the lock file {path} ({exc.strerror or exc})") from None
    os.set_blocking(fd, True)
    return os.fdopen(fd, "r+", encoding="utf-8", errors="replace")
