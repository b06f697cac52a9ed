"""Where a job's commands run and its files live: one small protocol, two implementations.

- :class:`LocalHost` (:data:`LOCAL`): this machine (subprocess, the local filesystem);
- :class:`sporch.orchestrator.remote.ssh.SshHost`: a cluster's login host over one SSH connection
  (commands in its shell after ``login.setup``, files over SFTP).

Submission, status, logs and cancel take a Host and never ask which kind it is;
:func:`host_for` picks it from a cluster's ``login`` section or a job record's ``remote``.
Tests pass their own Host (anything with these methods) instead of patching functions.
"""

from __future__ import annotations

import os
import shutil
import stat
import subprocess
import tempfile
from pathlib import Path
from typing import Any, List, Mapping, Optional, Protocol, Sequence, Tuple, Union

from sporch.orchestrator.errors import SporchError
from sporch.orchestrator.remote.pool import connect

Command = Union[str, Sequence[str]]


class Host(Protocol):
    #: "this machine" or ``user@host:port``.
    where: str
    #: True when the host is reached over ssh (messages say where, and how to fix PATH there).
    remote: bool

    def run(self, cmd: Command, *, timeout: float = 30.0, input: Optional[str] = None,
            env: Optional[Mapping[str, str]] = None, cwd: Optional[str] = None) -> Tuple[int, str, str]:
        """(exit status, stdout, stderr); TimeoutError after ``timeout`` seconds; a missing
        program exits 127 with ``<name>: command not found`` on stderr, as a shell says it."""
        ...

    def read_text(self, path: str) -> Optional[str]:
        """The file's text, None when it does not exist."""
        ...

    def read_bytes(self, path: str, offset: int = 0) -> Optional[bytes]:
        """The bytes from ``offset`` on (a tail), None when the file does not exist."""
        ...

    def size(self, path: str) -> Optional[int]: ...

    def write_text(self, path: str, text: str) -> None: ...

    def exists(self, path: str) -> bool: ...

    def listdir(self, path: str) -> List[str]:
        """Names in a folder; [] when it does not exist."""
        ...

    def abspath(self, path: str) -> str:
        """``~``, relative paths -> an absolute path on the host."""
        ...

    def mkdir(self, path: str) -> None:
        """Create one folder; FileExistsError when it exists."""
        ...

    def makedirs(self, path: str) -> Optional[str]:
        """``mkdir -p``; the topmost folder created (None when it existed)."""
        ...

    def remove_tree(self, path: str) -> None: ...

    def rmdir(self, path: str) -> bool:
        """Remove an empty folder; False when it is not empty or missing."""
        ...


class LocalHost:
    """This machine."""

    where = "this machine"
    remote = False

    def run(self, cmd: Command, *, timeout: float = 30.0, input: Optional[str] = None,
            env: Optional[Mapping[str, str]] = None, cwd: Optional[str] = None) -> Tuple[int, str, str]:
        argv = [str(c) for c in cmd] if not isinstance(cmd, str) else ["sh", "-c", cmd]
        full_env = None if env is None else {**os.environ, **env}
        try:
            proc = subprocess.run(argv, input=input, capture_output=True, text=True, timeout=timeout, env=full_env,
                                  cwd=cwd, stdin=None if input is not None else subprocess.DEVNULL)
        except FileNotFoundError:
            return 127, "", f"{argv[0]}: command not found\n"
        except subprocess.TimeoutExpired:
            raise TimeoutError(f"{argv[0]} did not end within {timeout:g} s") from None
        return proc.returncode, proc.stdout, proc.stderr

    def read_text(self, path: str) -> Optional[str]:
        data = self.read_bytes(path)
        return None if data is None else data.decode("utf-8", errors="replace")

    def read_bytes(self, path: str, offset: int = 0) -> Optional[bytes]:
        """None also for what is not a regular file (a FIFO would block, a device never end)."""
        try:
            fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
        except (FileNotFoundError, NotADirectoryError, IsADirectoryError):
            return None
        with os.fdopen(fd, "rb") as fh:
            if not stat.S_ISREG(os.fstat(fd).st_mode):
                return None
            fh.seek(offset)
            return fh.read()

    def size(self, path: str) -> Optional[int]:
        try:
            return os.stat(path).st_size
        except OSError:
            return None

    def write_text(self, path: str, text: str) -> None:
        """Atomically: a temporary file in the same folder, then a rename."""
        folder = os.path.dirname(path) or "."
        try:
            fd, tmp = tempfile.mkstemp(prefix=f".{os.path.basename(path)}.", suffix=".tmp", dir=folder)
            with os.fdopen(fd, "w", encoding="utf-8") as fh:
                fh.write(text)
            os.chmod(tmp, 0o644)  # mkstemp's 0600 would hide the file from the job's other users
            os.replace(tmp, path)
        except OSError as e:
            raise SporchError(f"cannot write {path}: {e.strerror}") from None

    def exists(self, path: str) -> bool:
        return os.path.exists(path)

    def listdir(self, path: str) -> List[str]:
        try:
            return os.listdir(path)
        except OSError:
            return []

    def abspath(self, path: str) -> str:
        return str(Path(path).expanduser().resolve())

    def mkdir(self, path: str) -> None:
        try:
            os.mkdir(path)
        except FileExistsError:
            raise
        except OSError as e:
            raise SporchError(f"cannot create {path}: {e.strerror}") from None

    def makedirs(self, path: str) -> Optional[str]:
        top = None
        for p in [Path(path), *Path(path).parents]:
            if p.exists():
                break
            top = p
        try:
            Path(path).mkdir(parents=True, exist_ok=True)
        except OSError as e:
            raise SporchError(f"cannot create {path}: {e.strerror}") from None
        return None if top is None else str(top)

    def remove_tree(self, path: str) -> None:
        shutil.rmtree(path, ignore_errors=True)

    def rmdir(self, path: str) -> bool:
        try:
            os.rmdir(path)
            return True
        except OSError:
            return False


LOCAL = LocalHost()


def host_for(login: Any) -> Host:
    """:data:`LOCAL` for None, else the (pooled, connected) SshHost of a ``login`` section
    (a LoginSpec, or the dict a job record keeps)."""
    return LOCAL if not login else connect(login)


def read_tail(host: Host, path: str, max_bytes: int) -> Optional[str]:
    """The last ``max_bytes`` of a file as text; None when it does not exist."""
    size = host.size(path)
    if size is None:
        return None
    data = host.read_bytes(path, max(0, size - max_bytes))
    return None if data is None else data.decode("utf-8", errors="replace")


class Tail:
    """New output of a growing file, across polls (``sporch logs -f``); a file that shrank
    (truncated, or recreated by a requeue) is read from its start again."""

    def __init__(self, host: Host, path: str) -> None:
        self.host = host
        self.path = path
        self.pos = 0

    def read_new(self) -> str:
        size = self.host.size(self.path)
        if size is None:
            return ""
        if size < self.pos:
            self.pos = 0
        if size == self.pos:
            return ""
        data = self.host.read_bytes(self.path, self.pos) or b""
        self.pos += len(data)
        return data.decode("utf-8", errors="replace")
