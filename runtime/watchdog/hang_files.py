"""The rank's files in ``<job_dir>/hang/`` when a collective hangs, and rank 0 reading them back.

``hang/rank<N>.txt``: a header (where the rank waits) then faulthandler's stacks of all its threads;
``hang/rank<N>.json``: its record (keys: :mod:`sporch.orchestrator.hangs`); with PyTorch's flight
recorder on, ``hang/fr_trace_rank_<N>`` (its buffer of this rank's collectives). Paths:
:class:`~sporch.orchestrator.contract.job_files.JobFiles`.
"""

from __future__ import annotations

import faulthandler
import os
import sys
import time
from pathlib import Path
from typing import Any, Mapping, Optional

from sporch.orchestrator.contract.numbers import digits_value
from sporch.orchestrator.contract.job_files import JobFiles
from sporch.orchestrator.contract.results import write_json_atomic
from sporch.orchestrator.hangs import collective_text, parse_record, record_names
from sporch.orchestrator.safe_files import open_nofollow, write_atomic

__all__ = ["stack_header", "write_hang_files", "dump_flight_recorder", "read_records"]


def stack_header(record: Mapping[str, Any], *, rank: int, host: Optional[str], timeout_s: float,
                 entered: int) -> str:
    """The lines above the stacks in ``hang/rank<N>.txt``: where the rank waits, and why it writes."""
    c = record.get("collective")
    if record["state"] == "timeout":
        what = (f"waited {c['waited_s']:.1f} s in {collective_text(c)}, longer than the collective timeout "
                f"({timeout_s:g} s)")
    elif c:
        what = (f"a peer timed out; this rank was waiting {c['waited_s']:.1f} s in {collective_text(c)}")
    else:
        what = "a peer timed out; this rank was in no collective"
    last = record.get("last")
    lines = [f"sporch collective watchdog: rank {rank} on {host or '?'} (pid {os.getpid()}), "
             f"{time.strftime('%Y-%m-%d %H:%M:%S')}",
             f"{record['state']}: {what}",
             f"last finished: {collective_text(last) if last else 'none'}; collectives entered: {entered}",
             f"main thread at: {record.get('at') or '?'}",
             "", "Python stacks of every thread (faulthandler, most recent call first):", ""]
    return "\n".join(lines) + "\n"


def write_hang_files(files: JobFiles, record: dict[str, Any], *, rank: int, host: Optional[str], timeout_s: float,
                     entered: int, backend: Optional[str]) -> None:
    """This rank's stack file, flight-recorder dump and record; a failure is printed with the stacks
    to stderr instead (the rank still exits)."""
    folder = Path(files.hang)
    try:
        folder.mkdir(parents=True, exist_ok=True)
        fd = open_nofollow(files.hang_stack(rank), os.O_WRONLY | os.O_CREAT | os.O_TRUNC)
        with os.fdopen(fd, "w", encoding="utf-8") as fh:  # never through a link in the job folder
            fh.write(stack_header(record, rank=rank, host=host, timeout_s=timeout_s, entered=entered))
            fh.flush()
            faulthandler.dump_traceback(file=fh, all_threads=True)
        dump_flight_recorder(files, rank, backend)
        write_json_atomic(files.hang_record(rank), record)
    except Exception as exc:  # noqa: BLE001 - the exit below still ends the hang
        print(f"sporch: the watchdog could not write {folder}: {exc}", file=sys.stderr, flush=True)
        faulthandler.dump_traceback(file=sys.stderr, all_threads=True)


def dump_flight_recorder(files: JobFiles, rank: int, backend: Optional[str]) -> None:
    """With PyTorch's flight recorder on (``TORCH_FR_BUFFER_SIZE``, or its older name
    ``TORCH_NCCL_TRACE_BUFFER_SIZE``, > 0): its buffer of this rank's collectives (NCCL's, or
    gloo's on torch >= 2.13), what TORCH_NCCL_DUMP_ON_TIMEOUT would write at the process
    group's own, later, timeout, into hang/fr_trace_rank_<N> (best effort)."""
    size = os.environ.get("TORCH_FR_BUFFER_SIZE") or os.environ.get("TORCH_NCCL_TRACE_BUFFER_SIZE") or "0"
    if not digits_value(size):
        return
    try:
        import torch._C._distributed_c10d as c10d  # noqa: PLC0415 - only with the recorder on, only on a hang

        names = ("_dump_nccl_trace", "_dump_fr_trace") if backend == "nccl" else ("_dump_fr_trace",)
        dump = next((getattr(c10d, n) for n in names if hasattr(c10d, n)), None)
        if dump is not None:
            write_atomic(files.fr_trace_prefix + str(rank), dump(), fsync=False)
    except Exception as exc:  # noqa: BLE001 - best effort
        print(f"sporch: no flight-recorder dump ({type(exc).__name__}: {exc})", file=sys.stderr, flush=True)


def read_records(files: JobFiles) -> dict[int, dict]:
    """Every rank's hang record found in ``hang/`` (unreadable or malformed ones left out), by rank."""
    folder = Path(files.hang)
    records: dict[int, dict] = {}
    try:
        names = record_names(os.listdir(folder))
    except OSError:
        names = []
    for name in names:
        try:
            rec = parse_record((folder / name).read_text(encoding="utf-8"))
        except OSError:
            rec = None
        if rec is not None:
            records[rec["rank"]] = rec
    return records
