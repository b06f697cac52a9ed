"""The watchdog's thread: it notices that a collective hangs and runs the steps the package
docstring lists (write this rank's stacks and record, alert the others, wait for theirs, record
the failure, rank 0 the diagnosis, exit with ``EXIT_HUNG``)."""

from __future__ import annotations

import os
import sys
import threading
import time
from typing import Any, Callable, Mapping, Optional

from sporch.orchestrator.contract import settings
from sporch.orchestrator.contract.exit_codes import EXIT_HUNG
from sporch.orchestrator.contract.job_files import JobFiles
from sporch.orchestrator.hangs import HANG_SCHEMA_VERSION, HangDiagnosis, collective_timeout_s, diagnose

from sporch.runtime.watchdog.collectives import CollectiveTracker
from sporch.runtime.watchdog.hang_files import read_records, write_hang_files
from sporch.runtime.watchdog.rendezvous import (ALERT_KEY, DONE_KEY, DUMPED_KEY, RECORDED_KEY, alerted, await_count, await_key, hosts,
                         publish_host, store_call)
from sporch.runtime.watchdog.stacks import main_thread_at

__all__ = ["Watchdog", "job_timeout_s"]


def job_timeout_s(configured: Optional[float], time_limit: Optional[str],
                  environ: Optional[Mapping[str, str]] = None) -> float:
    """The collective timeout of this run: ``$SPORCH_COLLECTIVE_TIMEOUT_S`` (a malformed value is
    ignored with a warning), else the job's (``configured``, then the default;
    :func:`~sporch.orchestrator.hangs.collective_timeout_s`)."""
    try:
        seconds = settings.read(settings.COLLECTIVE_TIMEOUT_S, environ)
    except ValueError as exc:
        print(f"sporch: ignoring {exc}", file=sys.stderr)
        seconds = None
    return seconds if seconds is not None else collective_timeout_s(configured, time_limit)


class Watchdog(CollectiveTracker):
    """This rank's watchdog over the collectives it enters (the package docstring; ``marker`` and
    what the rank is in: :class:`~.collectives.CollectiveTracker`).

    ``folder``: the job dir (``hang/`` goes there; None: nothing is written). ``store``: the
    job's rendezvous store (c10d ``Store``: ``set``, ``add``, ``check``, ``get``), through which
    the ranks alert each other; None: this rank only watches itself. ``on_hang(record)`` and,
    on rank 0, ``on_diagnosis(diagnosis or None)`` run in the watchdog's thread before it calls
    ``exit_fn(EXIT_HUNG)``. ``step``: set by the workload (the Progress) as steps finish.
    """

    def __init__(self, *, rank: int, world_size: int, timeout_s: float, folder: Optional[os.PathLike | str] = None,
                 host: Optional[str] = None, node: Optional[int] = None, store: Any = None,
                 poll_s: Optional[float] = None, grace_s: Optional[float] = None,
                 on_hang: Optional[Callable[[dict], None]] = None,
                 on_diagnosis: Optional[Callable[[Optional[HangDiagnosis]], None]] = None,
                 exit_fn: Callable[[int], Any] = os._exit, backend: Optional[str] = None,
                 marker: Optional[Callable[[], Any]] = None, environ: Optional[Mapping[str, str]] = None) -> None:
        if timeout_s <= 0:
            raise ValueError(f"collective timeout must be > 0 s, got {timeout_s}")
        super().__init__(rank=rank, world_size=world_size, marker=marker, environ=environ)
        self.timeout_s = float(timeout_s)
        self.files = JobFiles(str(folder)) if folder is not None else None
        self.host, self.node, self.store, self.backend = host, node, store, backend
        self.poll_s = poll_s if poll_s is not None else min(5.0, max(0.2, self.timeout_s / 10))
        self.grace_s = grace_s if grace_s is not None else min(30.0, max(5.0, 3 * self.poll_s + 3))
        self.on_hang, self.on_diagnosis, self.exit_fn = on_hang, on_diagnosis, exit_fn
        self._thread: Optional[threading.Thread] = None
        self._stopping = threading.Event()
        self._fired = threading.Event()
        self._finished = threading.Event()
        self.fired_state: Optional[str] = None

    # -- the thread ------------------------------------------------------------------------
    def start(self) -> "Watchdog":
        """Start the thread; tell the store this rank's host (one key, for the diagnosis)."""
        publish_host(self.store, self.rank, self.host)
        self._thread = threading.Thread(target=self._run, name="sporch-watchdog", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        """Stop watching (the rank's work is over). When the watchdog already fired, wait for
        it instead: it ends the process (this never returns unless ``exit_fn`` does)."""
        self.hold_if_fired()
        self._stopping.set()
        if self._thread is not None and self._thread is not threading.current_thread():
            self._thread.join(timeout=self.poll_s + 5)

    def hold_if_fired(self) -> None:
        """Block while the watchdog handles a hang (the main thread must not write its own
        record or exit meanwhile)."""
        if self._fired.is_set():
            self._finished.wait()

    @property
    def fired(self) -> bool:
        return self._fired.is_set()

    def _run(self) -> None:
        while not self._stopping.wait(self.poll_s):
            self.drain()
            cur = self.waiting_in()
            if cur is not None and time.monotonic() - cur.t0 > self.timeout_s:
                self.fire("timeout")
                return
            if alerted(self.store):
                self.fire("alerted")
                return

    # -- a hang ----------------------------------------------------------------------------
    def fire(self, state: str) -> None:
        """Write this rank's stacks and record, alert the others, wait for theirs, let launch.py
        record the failure (rank 0: the diagnosis too), then ``exit_fn(EXIT_HUNG)``."""
        if self._fired.is_set():
            return
        self._fired.set()
        self.fired_state = state
        store = self.store
        try:
            record = self.record(state)
            self._write(record)
            store_call(store, "set", ALERT_KEY, str(self.rank))
            store_call(store, "add", DUMPED_KEY, 1)
            await_count(store, DUMPED_KEY, self.world_size, self.grace_s, self.poll_s)
            if self.on_hang is not None:
                _quietly(self.on_hang, record)
            store_call(store, "add", RECORDED_KEY, 1)
            if self.rank == 0:
                await_count(store, RECORDED_KEY, self.world_size, self.grace_s, self.poll_s)
                if self.on_diagnosis is not None:
                    _quietly(self.on_diagnosis, self.diagnosis())
                store_call(store, "set", DONE_KEY, "1")
            else:  # until rank 0 has written result.json (srun ends the job when a rank exits)
                await_key(store, DONE_KEY, 2 * self.grace_s, self.poll_s)
        finally:
            for stream in (sys.stdout, sys.stderr):
                try:
                    stream.flush()
                except Exception:  # noqa: BLE001
                    pass
            self._finished.set()
            self.exit_fn(EXIT_HUNG)

    def record(self, state: str) -> dict[str, Any]:
        """This rank's hang record (keys: :mod:`sporch.orchestrator.hangs`)."""
        now = time.monotonic()
        cur, last = self.waiting_in(), self.last
        return {
            "rank": self.rank, "host": self.host, "node": self.node, "pid": os.getpid(), "time": time.time(),
            "timeout_s": self.timeout_s, "state": state,
            "collective": cur.as_dict(now) if cur is not None else None,
            "last": last.as_dict() if last is not None else None,
            "entered": self.entered, "at": main_thread_at(),
            "stack": f"rank{self.rank}.txt", "schema_version": HANG_SCHEMA_VERSION,
        }

    def _write(self, record: dict[str, Any]) -> None:
        if self.files is None:
            return
        write_hang_files(self.files, record, rank=self.rank, host=self.host, timeout_s=self.timeout_s,
                         entered=self.entered, backend=self.backend)

    def diagnosis(self) -> Optional[HangDiagnosis]:
        """Rank 0, once the records are in: who waited where, who never arrived."""
        if self.files is None:
            return None
        records = read_records(self.files)
        return diagnose(records, hosts(self.store, set(range(self.world_size)) - set(records)))


def _quietly(fn: Callable[[Any], None], arg: Any) -> None:
    try:
        fn(arg)
    except Exception as exc:  # noqa: BLE001 - the rank still exits
        print(f"sporch: watchdog callback failed: {type(exc).__name__}: {exc}", file=sys.stderr, flush=True)
