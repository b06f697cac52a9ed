"""Files on a login host over SFTP: :class:`SftpFiles`, the part of
:class:`~sporch.orchestrator.remote.ssh.SshHost` that moves small files (``write_text``,
``read_text``, ``makedirs``, ``remove_tree``, ``exists``...); a failed call reads as a missing
file only while the connection is alive (else :class:`~sporch.orchestrator.errors.Unreachable`).

The class is a mixin: it uses the host's ``connect``, ``run``, ``where``, ``_lost`` and its
paramiko client.
"""

from __future__ import annotations

import posixpath
import stat as _stat
from typing import List, Optional

from sporch.orchestrator.errors import SporchError
from sporch.orchestrator.remote.error_text import one_line

#: What a failed SFTP call raises: OSError (socket errors included), EOFError, paramiko's SSHException
#: (any Exception: paramiko is imported lazily; sporch's own errors pass through first).
_FAILURES = (OSError, EOFError, Exception)


class SftpFiles:
    """Files of the connected login host over SFTP (a mixin of SshHost)."""

    @property
    def sftp(self):
        self.connect()
        if self._sftp is None:
            try:
                self._sftp = self._client.open_sftp()
            except Exception as e:  # noqa: BLE001
                raise SporchError(f"ssh to {self.where}: SFTP is not available: {one_line(e)}") from None
        return self._sftp

    def home(self) -> str:
        if self._home is None:
            self._home = self.sftp.normalize(".")
        return self._home

    def abspath(self, path: str) -> str:
        """``~``, ``~/x`` and relative paths -> absolute paths on the login host."""
        if path == "~":
            return self.home()
        if path.startswith("~/"):
            return posixpath.join(self.home(), path[2:])
        if not path.startswith("/"):
            return posixpath.join(self.home(), path)
        return posixpath.normpath(path)

    def exists(self, path: str) -> bool:
        try:
            self.sftp.stat(path)
            return True
        except SporchError:
            raise
        except _FAILURES as e:  # FileNotFoundError included
            self._lost(e)
            return False

    def is_dir(self, path: str) -> bool:
        try:
            return _stat.S_ISDIR(self.sftp.stat(path).st_mode or 0)
        except OSError:
            return False

    def mkdir(self, path: str) -> None:
        """Create one folder; FileExistsError when it exists."""
        if self.exists(path):
            raise FileExistsError(path)
        try:
            self.sftp.mkdir(path)
        except OSError as e:
            if self.exists(path):
                raise FileExistsError(path) from None
            raise SporchError(f"cannot create {path} on {self.where}: {one_line(e)}") from None

    def makedirs(self, path: str) -> Optional[str]:
        """``mkdir -p``; returns the topmost folder created (None when it existed)."""
        path = posixpath.normpath(path)
        missing = []
        p = path
        while p not in ("/", "") and not self.exists(p):
            missing.append(p)
            p = posixpath.dirname(p)
        for m in reversed(missing):
            try:
                self.sftp.mkdir(m)
            except OSError as e:
                if not self.is_dir(m):
                    raise SporchError(f"cannot create {m} on {self.where}: {one_line(e)}") from None
        return missing[-1] if missing else None

    def write_text(self, path: str, text: str) -> None:
        try:
            with self.sftp.open(path, "w") as fh:
                fh.write(text.encode("utf-8"))
        except OSError as e:
            raise SporchError(f"cannot write {path} on {self.where}: {one_line(e)}") from None

    def read_text(self, path: str) -> Optional[str]:
        data = self.read_bytes(path)
        return None if data is None else data.decode("utf-8", errors="replace")

    def read_bytes(self, path: str, offset: int = 0) -> Optional[bytes]:
        try:
            with self.sftp.open(path, "rb") as fh:
                if offset:
                    fh.seek(offset)
                return fh.read()
        except FileNotFoundError:
            return None
        except SporchError:
            raise
        except _FAILURES as e:
            self._lost(e)
            raise SporchError(f"cannot read {path} on {self.where}: {one_line(e)}") from None

    def size(self, path: str) -> Optional[int]:
        try:
            return self.sftp.stat(path).st_size
        except SporchError:
            raise
        except _FAILURES as e:
            self._lost(e)
            return None

    def listdir(self, path: str) -> List[str]:
        try:
            return self.sftp.listdir(path)
        except SporchError:
            raise
        except _FAILURES as e:
            self._lost(e)
            return []

    def remove_tree(self, path: str) -> None:
        """``rm -rf`` on the login host (refuses ``/`` and the home folder)."""
        path = posixpath.normpath(path)
        if path in ("/", "", ".") or path == self.home():
            raise SporchError(f"refusing to remove {path!r} on {self.where}")
        rc, _, err = self.run(["rm", "-rf", "--", path], timeout=60)
        if rc != 0:
            raise SporchError(f"cannot remove {path} on {self.where}: {one_line(err)}")

    def rmdir(self, path: str) -> bool:
        try:
            self.sftp.rmdir(path)
            return True
        except OSError:
            return False
