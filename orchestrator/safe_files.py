"""Writing files in folders that others may write too (shared job and campaign folders),
without ever following a symbolic link at the file's name.

- :func:`write_atomic` creates a new temporary file next to the target (``O_EXCL`` and
  ``O_NOFOLLOW``: never an existing file, never through a link) and renames it over the
  target; a rename replaces a link at the target, it never writes where the link points.
- :func:`open_nofollow` opens a file that must keep its inode (a lock file) and refuses a
  link at its name with :class:`UnsafeFileError` (one line); :func:`open_append` opens a log
  that way.

Files sporch writes on the user's behalf, at a name the user gave (``-o``, ``--out``, ``--plot``,
``--store``...), follow one rule (:func:`check_output`, :func:`write_output`, :func:`output_file`):
a name that exists (a file, or a link even to nothing) is refused unless the command was given
``--force``; with it, what is there is *replaced* (a link is replaced, never followed). The data
goes to a new, randomly named file created with ``O_EXCL | O_NOFOLLOW`` (or, for a writer that
opens its path itself, such as ffmpeg or matplotlib, into a private folder sporch created), and
is then moved to the name: a hard link that fails when the name exists (no ``--force``), or a
rename (``--force``). Files a job writes into its own folder use ``replace=True``.

Files sporch reads that a user gave (:func:`open_regular`, :func:`read_regular`): only a regular
file is read; a FIFO, a device or a socket is refused without blocking (``O_NONBLOCK``).

Standard library only (the runtime writes its result files through this module).
"""

from __future__ import annotations

import contextlib
import errno
import os
import shutil
import stat
import tempfile
from pathlib import Path
from typing import BinaryIO, Iterator, Optional, Union

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


class OutputExistsError(UnsafeFileError):
    """An output name the user gave is taken (and the command was not given ``--force``)."""


class NotAFileError(UnsafeFileError):
    """A file to read is not a regular file (a FIFO would block, a device never end)."""


def check_output(path: Union[str, os.PathLike], force: bool, option: str = "") -> Path:
    """``path`` as an output name: refused when something is there (a file, a link, even a
    dangling one) and not ``force``; a folder or other non-file there is refused always."""
    path = Path(path)
    label = f"{option} {path}" if option else str(path)
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        return path
    except OSError as exc:
        raise UnsafeFileError(f"{label}: cannot look at it ({exc.strerror})") from None
    if stat.S_ISDIR(st.st_mode):
        raise UnsafeFileError(f"{label} is a folder; name a file")
    if not (stat.S_ISREG(st.st_mode) or stat.S_ISLNK(st.st_mode)):
        raise UnsafeFileError(f"{label} exists and is not a plain file; name another path")
    if not force:
        what = "a symbolic link" if stat.S_ISLNK(st.st_mode) else "a file"
        raise OutputExistsError(f"{label} exists ({what}); pass --force to replace it (a link is replaced, "
                                "never written through) or name another path")
    return path


def _publish(tmp: Path, path: Path, replace: bool) -> None:
    """Move the finished ``tmp`` to ``path``: a rename over what is there (``replace``), else a
    hard link that fails when the name was taken meanwhile."""
    if replace:
        os.replace(tmp, path)
        return
    try:
        os.link(tmp, path, follow_symlinks=False)
    except FileExistsError:
        raise OutputExistsError(f"{path} appeared while sporch was writing it; nothing was replaced: "
                                "pass --force to replace it or name another path") from None
    except OSError as exc:
        if exc.errno not in (errno.EPERM, errno.EXDEV, errno.ENOTSUP, errno.EOPNOTSUPP, errno.EMLINK):
            raise
        if os.path.lexists(path):  # a file system without hard links: check, then rename
            raise OutputExistsError(f"{path} appeared while sporch was writing it; nothing was replaced") from None
        os.replace(tmp, path)
        return
    os.unlink(tmp)


def write_output(path: Union[str, os.PathLike], data: Union[str, bytes], *, force: bool = False,
                 option: str = "") -> Path:
    """Write ``data`` at the user-named ``path`` by the rule above (the folder must exist)."""
    path = check_output(path, force, option)
    payload = data.encode("utf-8") if isinstance(data, str) else data
    fd, tmp = _new_temp(path)
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(payload)
        _publish(tmp, path, force)
    finally:
        _unlink_quietly(tmp)
    return path


@contextlib.contextmanager
def output_file(path: Union[str, os.PathLike], *, replace: bool, option: str = "") -> Iterator[Path]:
    """For a writer that opens its path itself (ffmpeg, imageio, matplotlib, sqlite): yields a
    path of the same name inside a new private folder (``mkdtemp``: random, created
    exclusively, mode 0700) beside ``path``; when the block ends without an error the file
    there is moved to ``path`` (``replace``: over what is there; else only where nothing is,
    see :func:`check_output`). The private folder is removed in every case."""
    path = check_output(path, replace, option)
    folder = Path(tempfile.mkdtemp(prefix=f".{path.name[:64]}.", suffix=".part", dir=path.parent))
    try:
        inner = folder / path.name
        yield inner
        st = os.lstat(inner)
        if not stat.S_ISREG(st.st_mode):
            raise UnsafeFileError(f"{inner} is not a plain file")
        _publish(inner, path, replace)
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def create_temp(path: Union[str, os.PathLike]) -> tuple:
    """(fd, path) of a new file beside ``path`` to be renamed over it: a random name, created
    with ``O_EXCL | O_NOFOLLOW`` (never an existing file, never through a link)."""
    return _new_temp(Path(path))


def _new_temp(path: Path) -> tuple:
    """(fd, path) of a new file beside ``path``: a random name, ``O_EXCL | O_NOFOLLOW``."""
    for _ in range(100):
        tmp = path.with_name(f".{path.name[:64]}.{os.urandom(6).hex()}.tmp")
        try:
            return os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | _NOFOLLOW | _CLOEXEC, 0o666), tmp
        except FileExistsError:
            continue
    raise FileExistsError(f"could not create a temporary file next to {path}")  # pragma: no cover


def _unlink_quietly(path: Path) -> None:
    try:
        os.unlink(path)
    except FileNotFoundError:
        pass


def open_regular(path: Union[str, os.PathLike]) -> BinaryIO:
    """``path`` opened for reading when it is a regular file (a link to one is followed); a
    FIFO, device, socket or folder is refused with :class:`NotAFileError` without blocking."""
    path = Path(path)
    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | _CLOEXEC)
    except IsADirectoryError:
        raise NotAFileError(f"{path} is a folder, not a file") from None
    try:
        mode = os.fstat(fd).st_mode
        if not stat.S_ISREG(mode):
            kind = "a folder" if stat.S_ISDIR(mode) else "a FIFO" if stat.S_ISFIFO(mode) else "not a regular file"
            raise NotAFileError(f"{path} is {kind}; sporch reads only regular files")
        if hasattr(os, "set_blocking"):
            os.set_blocking(fd, True)
        return os.fdopen(fd, "rb")
    except BaseException:
        os.close(fd)
        raise


def read_regular(path: Union[str, os.PathLike], limit: Optional[int] = None) -> bytes:
    """The bytes of the regular file ``path`` (the first ``limit`` when given); see :func:`open_regular`."""
    with open_regular(path) as fh:
        return fh.read() if limit is None else fh.read(limit)


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
