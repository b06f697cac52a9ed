"""What the rank is in: the record of one collective and the hot path that keeps it.

:class:`CollectiveTracker` holds the rank's current collective (None between collectives), the last
one it left, how many it entered and, on an asynchronous backend (NCCL), the ones the device may
still be running (``pending``, each with its marker). :class:`~.thread.Watchdog` is a tracker
whose thread watches these fields (the package docstring). Entering a collective costs a few
attribute stores; nothing is written while the job is healthy.
"""

from __future__ import annotations

import sys
import threading
import time
from collections import deque
from typing import Any, Callable, Mapping, Optional, Sequence

from sporch.runtime import faults

__all__ = ["Collective", "CollectiveTracker", "PENDING_PRUNE"]

#: Collectives awaiting their marker (asynchronous backends) beyond which the main thread drops
#: the completed ones itself (the watchdog's thread does it every poll).
PENDING_PRUNE = 4096


class Collective:
    """One collective this rank entered (see the package docstring for the fields)."""

    __slots__ = ("name", "kind", "group", "ranks", "seq", "layer", "step", "started", "t0")

    def __init__(self, name: str, kind: str, group: Optional[str], ranks: Sequence[int], layer: Optional[int]) -> None:
        self.name, self.kind, self.group, self.ranks, self.layer = name, kind, group, ranks, layer
        self.seq = 0
        self.step: Optional[int] = None
        self.started = 0.0  # epoch seconds
        self.t0 = 0.0  # monotonic

    def as_dict(self, now: Optional[float] = None) -> dict[str, Any]:
        out = {"name": self.name, "kind": self.kind, "group": self.group, "ranks": list(self.ranks),
               "seq": self.seq, "layer": self.layer, "step": self.step, "started": self.started}
        if now is not None:
            out["waited_s"] = round(now - self.t0, 3)
        return out


class _Watch:
    """What :meth:`CollectiveTracker.collective` returns: marks the rank inside the collective."""

    __slots__ = ("wd", "rec", "prev")

    def __init__(self, wd: "CollectiveTracker", rec: Collective) -> None:
        self.wd, self.rec, self.prev = wd, rec, None

    def __enter__(self) -> Collective:
        wd, rec = self.wd, self.rec
        if wd._fault is not None:
            wd._maybe_inject(rec)
        key = tuple(rec.ranks)
        rec.seq = wd._seq[key] = wd._seq.get(key, 0) + 1
        rec.step = wd.step
        rec.started, rec.t0 = time.time(), time.monotonic()
        self.prev = wd.current
        wd.current = rec
        wd.entered += 1
        return rec

    def __exit__(self, exc_type: Any, *exc: Any) -> bool:
        wd = self.wd
        wd.current = self.prev
        if wd.marker is not None and exc_type is None:
            # an asynchronous backend (NCCL): the call returned, the collective may still be
            # running; it stays this rank's until the marker recorded after it completes
            wd.pending.append((self.rec, wd.marker()))
            if len(wd.pending) > PENDING_PRUNE:
                wd.drain()
        else:
            wd.last = self.rec
        return False


class CollectiveTracker:
    """The collectives this rank enters: which one it is in, the last one it left.

    ``marker``: for an asynchronous backend (NCCL: the call only enqueues the collective on the
    GPU, the rank blocks later, at some synchronisation), a callable that records a marker after
    the collective (a CUDA event on the current stream, which waits for the collective) and
    returns it; ``marker().query()`` says whether it completed. Until then the collective stays
    this rank's (``pending``): a rank that enqueued it has arrived, a rank that never did has not.
    ``environ``: read for the injected hang (:func:`sporch.runtime.faults.hang_before`).
    """

    def __init__(self, *, rank: int, world_size: int, marker: Optional[Callable[[], Any]] = None,
                 environ: Optional[Mapping[str, str]] = None) -> None:
        self.rank, self.world_size = rank, world_size
        self.marker = marker
        #: (collective, marker) of the collectives an asynchronous backend may still be running, oldest first.
        self.pending: deque[tuple[Collective, Any]] = deque()
        self._drain_lock = threading.Lock()
        self.world = list(range(world_size))
        #: The collective this rank is in (None between collectives), the last one it left.
        self.current: Optional[Collective] = None
        self.last: Optional[Collective] = None
        self.entered = 0
        #: The workload's step being computed (1-based), where known.
        self.step: Optional[int] = None
        self._seq: dict[tuple, int] = {}
        self._fault = faults.hang_before(rank, environ)

    # -- the hot path --------------------------------------------------------------------
    def collective(self, name: str, ranks: Optional[Sequence[int]] = None, *, kind: str,
                   group: Optional[str] = None, layer: Optional[int] = None) -> _Watch:
        """A context manager: this rank is inside collective ``name`` over ``ranks`` (global
        ranks; None = the world) while the block runs."""
        return _Watch(self, Collective(name, kind, group if ranks is not None else (group or "world"),
                                       self.world if ranks is None else ranks, layer))

    def _maybe_inject(self, rec: Collective) -> None:
        before, seconds = self._fault  # type: ignore[misc]
        if before not in (rec.kind, rec.name):
            return
        self._fault = None
        print(f"sporch: fault injection ({faults.HANG_RANK.name}={self.rank}, {faults.HANG_BEFORE.name}={before}): rank "
              f"{self.rank} sleeps {seconds:g} s before {rec.name} ({rec.kind})", file=sys.stderr, flush=True)
        _injected_hang(seconds)

    # -- what the rank waits for -----------------------------------------------------------
    def waiting_in(self) -> Optional[Collective]:
        """The collective this rank waits for: the oldest one still running on an asynchronous
        backend, else the one its main thread is in (None: neither)."""
        pending = self.pending
        if pending:
            try:
                return pending[0][0]
            except IndexError:  # drained meanwhile
                pass
        return self.current

    def drain(self) -> None:
        """Drop the collectives whose marker says they completed (oldest first)."""
        with self._drain_lock:
            pending = self.pending
            while pending:
                rec, mark = pending[0]
                try:
                    done = bool(mark.query())
                except Exception:  # noqa: BLE001 - a device error: the collective counts as running
                    return
                if not done:
                    return
                pending.popleft()
                self.last = rec


def _injected_hang(seconds: float) -> None:
    """Fault injection (:func:`sporch.runtime.faults.hang_before`): this rank never arrives at its collective."""
    time.sleep(seconds)
