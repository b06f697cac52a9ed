"""Writing files in folders that others may write too (shared job and campaign folders),
without ever following a symbolic link at the file's name.

- :func:`write_atomic` creates a new temporary file next to the target (``O_EXCL`` and
  ``O_NOFOLLOW``: never an existing file, never through a link) and renames it over the
  target; a rename replaces a link at the target, it never writes where the link points.
- :func:`open_nofollow` opens a file that must keep its inode (a lock file) and refuses a
  link at its name with :class:`UnsafeFileError` (one line); :func:`open_append` opens a log
  that way.

Standard library only (the runtime writes its result files through this module).
"""

from __future__ import annotations

import errno
import os
import stat
from pathlib import Path
from typing import BinaryIO, Union

_NOFOLLOW = getattr(os, "O_NOFOLLOW", 0)
_CLOEXEC = getattr(os, "O_CLOEXEC", 0)


#: errno values that mean "the disk (or quota, or file size limit) has no room", or it is read-only.
NO_ROOM_ERRNOS = frozenset(getattr(errno, n) for n in ("ENOSPC", "EDQUOT", "EFBIG", "EROFS") if hasattr(errno, n))


def is_no_room(exc: BaseException) -> bool:
    """Whether ``exc`` says the file system has no room for a write (or takes none)."""
    return isinstance(exc, OSError) and exc.errno in NO_ROOM_ERRNOS


class UnsafeFileError(ValueError):
    """A file name in a job or campaign folder is a symbolic link (or not a plain file)."""

    exit_code = 2


def _refusal(path: Path) -> UnsafeFileError:
    return UnsafeFileError(f"{path} is a symbolic link or not a plain file; sporch never writes through one "
                           "(someone else may have placed it): remove it and run again")


def open_nofollow(path: Union[str, os.PathLike], flags: int, mode: int = 0o666) -> int:
    """``os.open`` that refuses a symbolic link (or a non-regular file) at ``path``."""
    path = Path(path)
    try:
        fd = os.open(path, flags | _NOFOLLOW | _CLOEXEC, mode)
    except OSError as e:
        if e.errno in (errno.ELOOP, errno.EMLINK) or (e.errno == errno.ENXIO and path.is_symlink()):
            raise _refusal(path) from None
        raise
    if not stat.S_ISREG(os.fstat(fd).st_mode):
        os.close(fd)
        raise _refusal(path)
    return fd


def open_append(path: Union[str, os.PathLike]) -> BinaryIO:
    """A log file opened for appending (created when missing), never through a link."""
    return os.fdopen(open_nofollow(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND), "ab")


def write_atomic(path: Union[str, os.PathLike], data: Union[str, bytes], *, fsync: bool = True) -> Path:
    """Write ``data`` to ``path``: a new temporary file in the same folder, then a rename.
    The folder is created when missing. Nothing is ever written through a link."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    payload = data.encode("utf-8") if isinstance(data, str) else data
    for _ in range(100):
        tmp = path.with_name(f".{path.name}.{os.urandom(6).hex()}.tmp")
        try:
            fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | _NOFOLLOW | _CLOEXEC, 0o666)
        except FileExistsError:
            continue
        break
    else:  # pragma: no cover - 100 collisions of 48 random bits
        raise FileExistsError(f"could not create a temporary file next to {path}")
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(payload)
            fh.flush()
            if fsync:
                os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException as exc:
        try:
            os.unlink(tmp)
        except FileNotFoundError:
            pass
        if isinstance(exc, OSError) and exc.filename is None:  # a failed write names no file: name it
            raise OSError(exc.errno, exc.strerror, str(path)) from None
        raise
    return path
