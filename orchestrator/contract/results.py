"""Result files of a run, written atomically (temporary file in the same folder, then rename).

Stdlib only: the orchestrator reads result files with these helpers too (imported lazily).

Layout of a run's output directory:
    <output_dir>/ranks/rank<N>.json   one per rank: host, timings, status, error
    <output_dir>/result.json          written by rank 0: layout, hosts per rank, timings, errors
    <output_dir>/checkpoint/          progress of a resumable workload (see sporch.runtime.progress)
"""

from __future__ import annotations

import json
import os
import tempfile
import traceback
from pathlib import Path
from typing import Any

from sporch.orchestrator.contract.files import JobFiles


def write_json_atomic(path: str | os.PathLike, data: Any) -> Path:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            json.dump(data, fh, indent=2, sort_keys=False, default=_jsonable)
            fh.write("\n")
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except FileNotFoundError:
            pass
        raise
    return path


def _jsonable(obj: Any) -> Any:
    if hasattr(obj, "item"):  # numpy / torch scalars
        return obj.item()
    if isinstance(obj, Path):
        return str(obj)
    raise TypeError(f"not JSON serialisable: {type(obj).__name__}")


def rank_file(output_dir: str | os.PathLike, rank: int) -> Path:
    return Path(JobFiles(str(output_dir)).rank_file(rank))


def result_file(output_dir: str | os.PathLike) -> Path:
    return Path(JobFiles(str(output_dir)).result)


def error_record(rank: int, exc: BaseException) -> dict[str, Any]:
    """What a failure looks like in a result file: the rank, the exception in one line, and
    the traceback for whoever wants it."""
    line = f"{type(exc).__name__}: {exc}".splitlines()[0] if str(exc) else type(exc).__name__
    return {
        "rank": rank,
        "error": line,
        "traceback": "".join(traceback.format_exception(type(exc), exc, exc.__traceback__)),
    }


def read_rank_files(output_dir: str | os.PathLike) -> dict[int, dict[str, Any]]:
    out: dict[int, dict[str, Any]] = {}
    folder = Path(JobFiles(str(output_dir)).ranks)
    if not folder.is_dir():
        return out
    for f in sorted(folder.glob("rank*.json")):
        try:
            data = json.loads(f.read_text(encoding="utf-8"))
        except (OSError, json.JSONDecodeError):
            continue
        out[int(data.get("rank", f.stem[4:]))] = data
    return out


#: Errors that survivors of a failed peer raise (a broken collective): not the root cause.
SECONDARY_ERRORS = ("Connection closed by peer", "Connection reset", "NCCL communicator", "timed out",
                    "Timeout", "recvBytes", "Socket", "Broken pipe", "DistBackendError")


def root_cause(errors: list[dict[str, Any]]) -> dict[str, Any] | None:
    """The error that most likely started a failure: the first (by rank) that is not a peer's
    broken collective; else the first."""
    if not errors:
        return None
    for e in errors:
        if not any(s in str(e.get("error", "")) for s in SECONDARY_ERRORS):
            return e
    return errors[0]
