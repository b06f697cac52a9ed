"""Result files of a run, written atomically (temporary file in the same folder, then rename).

Layout of a run's output directory:
    <output_dir>/ranks/rank<N>.json   one per rank: host, timings, status, error
    <output_dir>/result.json          written by rank 0: layout, hosts per rank, timings, errors
    <output_dir>/checkpoint/          progress of a resumable workload (see runtime.checkpoint)
"""

from __future__ import annotations

import json
import os
import tempfile
import traceback
from pathlib import Path
from typing import Any


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
    return Path(output_dir) / "ranks" / f"rank{rank}.json"


def result_file(output_dir: str | os.PathLike) -> Path:
    return Path(output_dir) / "result.json"


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
    folder = Path(output_dir) / "ranks"
    if not folder.is_dir():
        return out
    for f in sorted(folder.glob("rank*.json")):
        try:
            data = json.loads(f.read_text(encoding="utf-8"))
        except (OSError, json.JSONDecodeError):
            continue
        out[int(data.get("rank", f.stem[4:]))] = data
    return out
