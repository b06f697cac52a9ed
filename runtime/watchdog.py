"""The collective watchdog: a hang names the rank that never arrived.

Every rank runs one :class:`Watchdog` (a daemon thread; ``launch.py`` starts it and hands it to
the :class:`~sporch.runtime.parallel.ParallelContext` and the Progress, there is no
process-global one). Each collective the runtime issues is wrapped::

    with watchdog.collective("ulysses_qkv", ranks, kind="all_to_all", group="ulysses", layer=3):
        dist.all_to_all_single(...)

(``ctx.collective(name, dim, kind=...)`` does it for a mesh group.) Entering one costs a few
attribute stores: the rank's current collective (name, kind, group and its ranks, its number
``seq`` among this rank's collectives on that group, layer, step, start time). Nothing is
written while the job is healthy. On NCCL the call only enqueues the collective (the rank
blocks later, at some synchronisation): a CUDA event recorded after it (``marker``) keeps the
collective the rank's until the device has finished it.

When the current collective has waited longer than the timeout
(:func:`sporch.orchestrator.hangs.collective_timeout_s`: ``resources.collective_timeout``,
``$SPORCH_COLLECTIVE_TIMEOUT_S``, default 300 s or a quarter of the time limit), the rank:

1. writes ``<job_dir>/hang/rank<N>.txt`` (where it waits, then faulthandler's stacks of all its
   threads) and ``hang/rank<N>.json`` (the record, :mod:`sporch.orchestrator.hangs`);
   with PyTorch's flight recorder on (``TORCH_FR_BUFFER_SIZE``, set by the batch script on GPU
   clusters) also its buffer of this rank's collectives (``hang/fr_trace_rank_<N>``);
2. raises the alert in the job's rendezvous store (the c10d store: no shared-file polling).
   Every other rank's watchdog checks the alert each poll (``timeout / 10``, 0.2 to 5 s) and,
   collective or not, writes its own stacks and record the same way (``state: alerted``): a
   rank that sleeps before its all-to-all shows where it sleeps;
3. once every rank has written (or a grace of a few seconds has passed), calls ``on_hang``
   (launch.py writes the rank's ``ranks/rank<N>.json``); rank 0 then reads the records,
   :func:`~sporch.orchestrator.hangs.diagnose` names the ranks that never arrived,
   and ``on_diagnosis`` writes ``result.json`` with that line;
4. exits with :data:`~sporch.orchestrator.contract.exit_codes.EXIT_HUNG` (``srun
   --kill-on-bad-exit`` and the local runner end the job).

The process group's own timeout is set above the watchdog's
(:func:`~sporch.orchestrator.hangs.pg_timeout_s`), so gloo and NCCL give up later.

Fault injection, for tests only: :func:`sporch.runtime.faults.hang_before` names a rank that
sleeps before a collective (docs/settings.md); without it nothing changes.

Torch-free: the store is passed in (``torch.distributed``'s default store).
"""

from __future__ import annotations

import faulthandler
import os
import signal
import sys
import threading
import time
from collections import deque
from pathlib import Path
from typing import Any, Callable, Mapping, Optional, Sequence

from sporch.orchestrator.contract.exit_codes import EXIT_HUNG
from sporch.orchestrator.contract.job_files import JobFiles
from sporch.orchestrator.contract import settings
from sporch.orchestrator.hangs import (HANG_SCHEMA_VERSION, HangDiagnosis,
                                                collective_text, collective_timeout_s, diagnose,
                                                parse_record, record_names)
from sporch.orchestrator.contract.results import write_json_atomic
from sporch.orchestrator.safe_files import open_nofollow, write_atomic
from sporch.runtime import faults

__all__ = ["Watchdog", "Collective", "job_timeout_s"]

#: Keys in the rendezvous store.
ALERT_KEY = "sporch/hang/alert"
DUMPED_KEY = "sporch/hang/dumped"
RECORDED_KEY = "sporch/hang/recorded"
DONE_KEY = "sporch/hang/done"
HOST_KEY = "sporch/hang/host/{rank}"

#: Collectives awaiting their marker (asynchronous backends) beyond which the main thread drops
#: the completed ones itself (the watchdog's thread does it every poll).
PENDING_PRUNE = 4096

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


class Collective:
    """One collective this rank entered (see the module docstring for the fields)."""

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
    """What :meth:`Watchdog.collective` returns: marks the rank inside the collective."""

    __slots__ = ("wd", "rec", "prev")

    def __init__(self, wd: "Watchdog", rec: Collective) -> None:
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


class Watchdog:
    """This rank's watchdog over the collectives it enters (module docstring).

    ``folder``: the job dir (``hang/`` goes there; None: nothing is written). ``store``: the
    job's rendezvous store (c10d ``Store``: ``set``, ``add``, ``check``, ``get``), through which
    the ranks alert each other; None: this rank only watches itself. ``on_hang(record)`` and,
    on rank 0, ``on_diagnosis(diagnosis or None)`` run in the watchdog's thread before it calls
    ``exit_fn(EXIT_HUNG)``. ``step``: set by the workload (the Progress) as steps finish.

    ``marker``: for an asynchronous backend (NCCL: the call only enqueues the collective on the
    GPU, the rank blocks later, at some synchronisation), a callable that records a marker after
    the collective (a CUDA event on the current stream, which waits for the collective) and
    returns it; ``marker().query()`` says whether it completed. Until then the collective stays
    this rank's (``pending``): a rank that enqueued it has arrived, a rank that never did has not.
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
        self.rank, self.world_size, self.timeout_s = rank, world_size, float(timeout_s)
        self.files = JobFiles(str(folder)) if folder is not None else None
        self.host, self.node, self.store, self.backend = host, node, store, backend
        self.poll_s = poll_s if poll_s is not None else min(5.0, max(0.2, self.timeout_s / 10))
        self.grace_s = grace_s if grace_s is not None else min(30.0, max(5.0, 3 * self.poll_s + 3))
        self.on_hang, self.on_diagnosis, self.exit_fn = on_hang, on_diagnosis, exit_fn
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
        self._thread: Optional[threading.Thread] = None
        self._stopping = threading.Event()
        self._fired = threading.Event()
        self._finished = threading.Event()
        self.fired_state: Optional[str] = None

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

    # -- the thread ------------------------------------------------------------------------
    def start(self) -> "Watchdog":
        """Start the thread; tell the store this rank's host (one key, for the diagnosis)."""
        if self.store is not None and self.host:
            try:
                self.store.set(HOST_KEY.format(rank=self.rank), self.host)
            except Exception:  # noqa: BLE001 - the host is a nicety of the diagnosis
                pass
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
            if self._alerted():
                self.fire("alerted")
                return

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

    def _alerted(self) -> bool:
        if self.store is None:
            return False
        try:
            return bool(self.store.check([ALERT_KEY]))
        except Exception:  # noqa: BLE001 - a store that went away: the collectives fail on their own
            return False

    # -- a hang ----------------------------------------------------------------------------
    def fire(self, state: str) -> None:
        """Write this rank's stacks and record, alert the others, wait for theirs, let launch.py
        record the failure (rank 0: the diagnosis too), then ``exit_fn(EXIT_HUNG)``."""
        if self._fired.is_set():
            return
        self._fired.set()
        self.fired_state = state
        try:
            record = self.record(state)
            self._write(record)
            self._store("set", ALERT_KEY, str(self.rank))
            self._store("add", DUMPED_KEY, 1)
            self._await_count(DUMPED_KEY, self.grace_s)
            if self.on_hang is not None:
                _quietly(self.on_hang, record)
            self._store("add", RECORDED_KEY, 1)
            if self.rank == 0:
                self._await_count(RECORDED_KEY, self.grace_s)
                if self.on_diagnosis is not None:
                    _quietly(self.on_diagnosis, self.diagnosis())
                self._store("set", DONE_KEY, "1")
            else:  # until rank 0 has written result.json (srun ends the job when a rank exits)
                self._await_key(DONE_KEY, 2 * self.grace_s)
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

    def header(self, record: Mapping[str, Any]) -> str:
        c = record.get("collective")
        if record["state"] == "timeout":
            what = (f"waited {c['waited_s']:.1f} s in {collective_text(c)}, longer than the collective timeout "
                    f"({self.timeout_s:g} s)")
        elif c:
            what = (f"a peer timed out; this rank was waiting {c['waited_s']:.1f} s in {collective_text(c)}")
        else:
            what = "a peer timed out; this rank was in no collective"
        last = record.get("last")
        lines = [f"sporch collective watchdog: rank {self.rank} on {self.host or '?'} (pid {os.getpid()}), "
                 f"{time.strftime('%Y-%m-%d %H:%M:%S')}",
                 f"{record['state']}: {what}",
                 f"last finished: {collective_text(last) if last else 'none'}; collectives entered: {self.entered}",
                 f"main thread at: {record.get('at') or '?'}",
                 "", "Python stacks of every thread (faulthandler, most recent call first):", ""]
        return "\n".join(lines) + "\n"

    def _write(self, record: dict[str, Any]) -> None:
        if self.files is None:
            return
        folder = Path(self.files.hang)
        try:
            folder.mkdir(parents=True, exist_ok=True)
            fd = open_nofollow(self.files.hang_stack(self.rank), os.O_WRONLY | os.O_CREAT | os.O_TRUNC)
            with os.fdopen(fd, "w", encoding="utf-8") as fh:  # never through a link in the job folder
                fh.write(self.header(record))
                fh.flush()
                faulthandler.dump_traceback(file=fh, all_threads=True)
            self._dump_flight_recorder()
            write_json_atomic(self.files.hang_record(self.rank), record)
        except Exception as exc:  # noqa: BLE001 - the exit below still ends the hang
            print(f"sporch: the watchdog could not write {folder}: {exc}", file=sys.stderr, flush=True)
            faulthandler.dump_traceback(file=sys.stderr, all_threads=True)

    def _dump_flight_recorder(self) -> None:
        """With PyTorch's flight recorder on (``TORCH_FR_BUFFER_SIZE``, or its older name
        ``TORCH_NCCL_TRACE_BUFFER_SIZE``, > 0): its buffer of this rank's collectives (NCCL's, or
        gloo's on torch >= 2.13), what TORCH_NCCL_DUMP_ON_TIMEOUT would write at the process
        group's own, later, timeout, into hang/fr_trace_rank_<N> (best effort)."""
        size = os.environ.get("TORCH_FR_BUFFER_SIZE") or os.environ.get("TORCH_NCCL_TRACE_BUFFER_SIZE") or "0"
        if self.files is None or not size.strip().isdigit() or int(size) <= 0:
            return
        try:
            import torch._C._distributed_c10d as c10d  # noqa: PLC0415 - only with the recorder on, only on a hang

            names = ("_dump_nccl_trace", "_dump_fr_trace") if self.backend == "nccl" else ("_dump_fr_trace",)
            dump = next((getattr(c10d, n) for n in names if hasattr(c10d, n)), None)
            if dump is not None:
                write_atomic(self.files.fr_trace_prefix + str(self.rank), dump(), fsync=False)
        except Exception as exc:  # noqa: BLE001 - best effort
            print(f"sporch: no flight-recorder dump ({type(exc).__name__}: {exc})", file=sys.stderr, flush=True)

    def diagnosis(self) -> Optional[HangDiagnosis]:
        """Rank 0, once the records are in: who waited where, who never arrived."""
        if self.files is None:
            return None
        folder = Path(self.files.hang)
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
        return diagnose(records, self._hosts(set(range(self.world_size)) - set(records)))

    def _hosts(self, ranks: set[int]) -> dict[int, str]:
        out: dict[int, str] = {}
        for r in sorted(ranks)[:16]:
            key = HOST_KEY.format(rank=r)
            try:
                if self.store is not None and self.store.check([key]):
                    out[r] = self.store.get(key).decode("utf-8", "replace")
            except Exception:  # noqa: BLE001
                pass
        return out

    def _store(self, op: str, key: str, value: Any) -> Any:
        if self.store is None:
            return None
        try:
            return getattr(self.store, op)(key, value)
        except Exception:  # noqa: BLE001 - a store that went away: the grace below bounds the wait
            return None

    def _await_count(self, key: str, seconds: float) -> None:
        deadline = time.monotonic() + seconds
        while self.store is not None and time.monotonic() < deadline:
            count = self._store("add", key, 0)
            if count is None or int(count) >= self.world_size:
                return
            time.sleep(min(0.2, self.poll_s))

    def _await_key(self, key: str, seconds: float) -> None:
        deadline = time.monotonic() + seconds
        while self.store is not None and time.monotonic() < deadline:
            try:
                if self.store.check([key]):
                    return
            except Exception:  # noqa: BLE001
                return
            time.sleep(min(0.2, self.poll_s))


def _injected_hang(seconds: float) -> None:
    """Fault injection (:func:`sporch.runtime.faults.hang_before`): this rank never arrives at its collective."""
    time.sleep(seconds)


def _quietly(fn: Callable[[Any], None], arg: Any) -> None:
    try:
        fn(arg)
    except Exception as exc:  # noqa: BLE001 - the rank still exits
        print(f"sporch: watchdog callback failed: {type(exc).__name__}: {exc}", file=sys.stderr, flush=True)


_TORCH_DIR = os.sep + "torch" + os.sep


def main_thread_at() -> Optional[str]:
    """``file.py:123 in function``: the innermost frame of the main thread outside torch."""
    frame = sys._current_frames().get(threading.main_thread().ident or -1)
    while frame is not None:
        code = frame.f_code
        if _TORCH_DIR not in code.co_filename:
            return f"{os.path.basename(code.co_filename)}:{frame.f_lineno} in {code.co_name}"
        frame = frame.f_back
    return None


def dump_stacks_on_sigterm() -> None:
    """SIGTERM (Slurm's time limit, ``scancel``, the local runner at the time limit) writes
    every thread's stack to stderr (the rank's log) before the process ends as it would."""
    try:
        faulthandler.register(signal.SIGTERM, file=sys.stderr, all_threads=True, chain=True)
    except (AttributeError, ValueError, RuntimeError, OSError):  # no such signal API here; not fatal
        pass
