"""Packs: the points of a group that run inside one array task (``run.pack``).

Every point of a group asks Slurm for the same nodes x GPUs (groups.resource_shape), so under
sequence parallelism they can share one allocation and one process world:
``python -m sporch.runtime.pack`` runs them one after another, re-forming the process groups
per layout and loading the weights once per model and dtype. A pack is at most
``run.pack_size`` points (no count limit by default) whose limits add up to at most
``run.pack_time`` (8 hours by default), in matrix order; its time limit is its points' limits
added up.
"""

from __future__ import annotations

from typing import List, Optional, Sequence

from sporch.orchestrator.contract.durations import time_seconds


def make_packs(point_ids: Sequence[str], pack_size: Optional[int], *, point_time: Optional[str] = None,
               max_time: Optional[str] = None) -> List[List[str]]:
    """``point_ids`` in consecutive packs of at most ``pack_size`` points (None: no count
    limit) whose time limits (``point_time`` each) add up to at most ``max_time`` (at least
    one point a pack)."""
    ids = list(point_ids)
    size = pack_size or max(1, len(ids))
    if point_time and max_time:
        per, most = _seconds(point_time), _seconds(max_time)
        size = min(size, max(1, most // per))
    return [ids[i:i + size] for i in range(0, len(ids), size)]


def _seconds(text: str) -> int:
    seconds = time_seconds(text)
    if seconds is None:
        raise ValueError(f"time {text!r} is not a Slurm time")
    return max(1, seconds)


def pack_time(point_time: str, count: int) -> str:
    """The time limit of a pack of ``count`` points whose own limit is ``point_time`` (a Slurm
    time), as ``[D-]HH:MM:SS``."""
    total = _seconds(point_time) * count
    days, rest = divmod(total, 86400)
    hours, rest = divmod(rest, 3600)
    minutes, secs = divmod(rest, 60)
    clock = f"{hours:02d}:{minutes:02d}:{secs:02d}"
    return f"{days}-{clock}" if days else clock


def pack_limit(pack_time_: str, partition_max: Optional[str]) -> str:
    """The most time one pack may ask for: ``run.pack_time``, or the partition's MaxTime when
    that is shorter (a job over it would wait in the queue for ever)."""
    if partition_max and _seconds(partition_max) < _seconds(pack_time_):
        return partition_max
    return pack_time_
