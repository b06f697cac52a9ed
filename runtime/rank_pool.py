"""Rank processes that start once, for tests: long-lived worker processes that
:func:`sporch.runtime.testing.run_distributed` hands its ranks to, instead of starting a process
(and importing torch in it) per rank per call.

    pool = RankPool()
    with pool.serving():          # run_distributed in this context runs its ranks on the pool
        run_distributed(fn, 4)
    pool.close()

tests/conftest.py serves one pool for the whole test session.

A worker is a ``spawn`` process that imports ``preload`` (torch) once and then runs one task at a
time, each as a process the caller had just spawned would run it:

* before the task: the caller's environment (``os.environ``, replaced whole), working directory
  and ``sys.path`` as they were when it handed the task over; the peak resident set reset (what a
  CPU rank reports as its peak memory covers this task only); the task's stdout and stderr go to
  files that the caller copies to its own file descriptors 1 and 2 when the call ends (pytest's
  capture shows them in the test that ran them);
* after it: the worker's own environment, directory and path again; every process group
  destroyed; Dynamo's caches and torch.distributed's caches keyed by device mesh cleared; torch's thread count, random state, grad mode, default dtype
  and deterministic switch as they were when the worker started; signal handlers, the alarm and
  warning filters likewise. A task that leaves a thread running retires its worker.

A worker whose task failed ends (a failed rank ends its process: ``testing``'s rank body exits),
and one still running when its call fails or times out is stopped: either way a new worker starts
at once, in the background, in its place. The pool knows nothing of torch.distributed: a task is
the caller's function and arguments (the rank body), pickled by reference.
"""

from __future__ import annotations

import contextlib
import contextvars
import faulthandler
import functools
import gc
import importlib
import multiprocessing as mp
import os
import pickle
import shutil
import signal
import sys
import tempfile
import threading
import time
import traceback
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterator, Optional, Sequence

#: What every worker imports once, before its first task.
DEFAULT_PRELOAD = ("torch", "torch.distributed")
#: How long a worker may take to tidy up after its task (process groups, Dynamo) before it is
#: replaced instead of reused.
TIDY_TIMEOUT_S = 60.0
#: The signals whose handlers a task may change (they are put back after it).
RESTORED_SIGNALS = tuple(getattr(signal, name) for name in ("SIGTERM", "SIGINT", "SIGHUP", "SIGUSR1", "SIGUSR2",
                                                              "SIGALRM") if hasattr(signal, name))

_SERVING: contextvars.ContextVar[Optional["RankPool"]] = contextvars.ContextVar("sporch_rank_pool", default=None)


def serving_pool() -> Optional["RankPool"]:
    """The pool that :meth:`RankPool.serving` put in force here, or None (fresh processes)."""
    return _SERVING.get()


# --------------------------------------------------------------------------------------
# worker side
# --------------------------------------------------------------------------------------

@dataclass
class WorkerState:
    """What a task may change in its worker and what the worker puts back after it."""

    environ: dict[str, str]
    cwd: str
    sys_path: list[str]
    handlers: dict[int, Any]
    warning_filters: list
    thread_ids: set[int]
    torch: Optional[dict[str, Any]] = field(default=None)

    @classmethod
    def capture(cls) -> "WorkerState":
        torch_state = None
        if "torch" in sys.modules:
            import torch

            torch_state = {"threads": torch.get_num_threads(), "rng": torch.get_rng_state(),
                           "grad": torch.is_grad_enabled(), "dtype": torch.get_default_dtype(),
                           "deterministic": torch.are_deterministic_algorithms_enabled()}
        return cls(environ=dict(os.environ), cwd=os.getcwd(), sys_path=list(sys.path),
                   handlers={s: signal.getsignal(s) for s in RESTORED_SIGNALS},
                   warning_filters=list(warnings.filters), thread_ids={t.ident for t in threading.enumerate()},
                   torch=torch_state)

    def restore(self) -> list[str]:
        """Put everything back; returns what could not be (the worker is then retired)."""
        problems = []
        warnings.filters[:] = self.warning_filters  # first: a task's "error" filter must not turn
        warnings._filters_mutated()  # noqa: SLF001 - the clean-up's own deprecation warnings into errors
        if "torch" in sys.modules:
            problems += self._restore_torch()
        for sig, handler in self.handlers.items():
            with contextlib.suppress(Exception):
                faulthandler.unregister(sig)  # e.g. the launcher's stacks on SIGTERM
            if signal.getsignal(sig) is not handler and handler is not None:
                signal.signal(sig, handler)
        signal.alarm(0)
        warnings.filters[:] = self.warning_filters
        warnings._filters_mutated()  # noqa: SLF001 - what warnings.simplefilter itself calls
        _replace_environ(self.environ)
        os.chdir(self.cwd)
        sys.path[:] = self.sys_path
        deadline = time.monotonic() + 2.0
        for thread in [t for t in threading.enumerate() if t.ident not in self.thread_ids]:
            thread.join(max(0.0, deadline - time.monotonic()))
        left = [t.name for t in threading.enumerate() if t.ident not in self.thread_ids and t.is_alive()]
        if left:
            problems.append(f"threads left running: {', '.join(left)}")
        return problems

    def _restore_torch(self) -> list[str]:
        import torch

        problems = []
        try:
            import torch.distributed as dist

            if dist.is_available() and dist.is_initialized():
                dist.destroy_process_group()  # every group, subgroups included
        except Exception as exc:  # noqa: BLE001 - reported: the worker is not reused
            problems.append(f"destroy_process_group: {exc}")
        if "torch._dynamo" in sys.modules:
            torch._dynamo.reset()  # noqa: SLF001 - torch.compiler.reset() does the same
        _forget_distributed_caches()
        if self.torch is None:
            return problems + ["torch was imported by a task, not at start: its state is unknown"]
        torch.set_num_threads(self.torch["threads"])
        torch.set_rng_state(self.torch["rng"])
        torch.set_grad_enabled(self.torch["grad"])
        torch.set_default_dtype(self.torch["dtype"])
        torch.use_deterministic_algorithms(self.torch["deterministic"])
        return problems


def _forget_distributed_caches() -> None:
    """Empty torch.distributed's caches keyed by DeviceMesh (DTensor's sharding decisions, the
    redistribute plans): a mesh compares equal to an earlier world's mesh of the same ranks, and a
    cached decision hands out that mesh, whose process groups are gone (or, as groups are named by
    a count that starts again in each world, another group under the same name)."""
    if "torch.distributed.tensor" not in sys.modules:
        return
    from torch.distributed.tensor import debug

    debug._clear_sharding_prop_cache()  # noqa: SLF001 - the Python and C++ propagation caches
    with warnings.catch_warnings():  # reading a deprecated alias (torch.distributed.reduce_op) warns
        warnings.simplefilter("ignore")
        for name, module in list(sys.modules.items()):
            if not name.startswith("torch.distributed") or module is None:
                continue
            for value in list(vars(module).values()):
                owners = [value] + (list(vars(value).values()) if isinstance(value, type) else [])
                for item in owners:
                    item = getattr(item, "__func__", item)  # a staticmethod's or classmethod's function
                    if isinstance(item, functools._lru_cache_wrapper):  # noqa: SLF001
                        item.cache_clear()
            clear = getattr(module, "clear_redistribute_planner_cache", None)
            if callable(clear):
                clear()


def _replace_environ(environ: dict[str, str]) -> None:
    for key in [k for k in os.environ if k not in environ]:
        del os.environ[key]
    for key, value in environ.items():
        if os.environ.get(key) != value:
            os.environ[key] = value


@contextlib.contextmanager
def _output_to(out_path: str, err_path: str) -> Iterator[None]:
    """File descriptors 1 and 2 (and sys.stdout / sys.stderr) into the task's files."""
    sys.stdout.flush()
    sys.stderr.flush()
    saved = os.dup(1), os.dup(2)
    for fd, path in ((1, out_path), (2, err_path)):
        target = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
        os.dup2(target, fd)
        os.close(target)
    try:
        yield
    finally:
        sys.stdout.flush()
        sys.stderr.flush()
        for fd, old in zip((1, 2), saved):
            os.dup2(old, fd)
            os.close(old)


def _reset_peak_memory() -> None:
    """The process's peak resident set (``ru_maxrss``, what a CPU rank reports as its peak memory)
    starts again from what the worker holds now, as a fresh process's starts from its imports:
    freed memory goes back to the system first (Linux; elsewhere the peak is the worker's)."""
    gc.collect()
    with contextlib.suppress(Exception):
        import ctypes

        ctypes.CDLL(None).malloc_trim(0)
    with contextlib.suppress(OSError):
        with open("/proc/self/clear_refs", "w") as fh:
            fh.write("5")  # reset the high-water mark of the resident set


def _end_with_parent() -> None:
    """SIGTERM when the process that started this worker ends (Linux; elsewhere the worker ends
    when its pipe closes, once it is idle)."""
    with contextlib.suppress(Exception):
        import ctypes

        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(1, int(signal.SIGTERM))  # PR_SET_PDEATHSIG


def _serve(conn: Any, preload: tuple[str, ...]) -> None:
    """A worker's life: import ``preload``, then run tasks until told to stop or the pipe closes."""
    _end_with_parent()
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(Exception):
            stream.reconfigure(write_through=True)  # nothing buffered is lost when a task's rank exits
    for name in preload:
        importlib.import_module(name)
    start = WorkerState.capture()
    conn.send(("up", os.getpid()))
    while True:
        try:
            message = conn.recv()
        except (EOFError, OSError):
            return
        if message[0] != "run":
            return
        _, task_path, out_path, err_path = message
        with _output_to(out_path, err_path):
            _run_task(task_path)
            problems = start.restore()
            if problems:
                print(f"sporch rank pool: worker {os.getpid()} retired: {'; '.join(problems)}", file=sys.stderr)
        conn.send(("retire", problems) if problems else ("idle",))
        if problems:
            return


def _run_task(task_path: str) -> None:
    """Take on the caller's environment, directory and path, then call the task; a task that
    raises (or cannot be unpickled) ends the worker, its traceback on the task's stderr."""
    with open(task_path, "rb") as fh:
        task = pickle.load(fh)
    _replace_environ(task["environ"])
    os.chdir(task["cwd"])
    sys.path[:] = task["sys_path"]
    _reset_peak_memory()
    try:
        target, args = pickle.loads(task["call"])
        target(*args)
    except BaseException:  # noqa: BLE001 - the caller sees the worker die and reads this
        traceback.print_exc()
        sys.stderr.flush()
        os._exit(1)


# --------------------------------------------------------------------------------------
# caller side
# --------------------------------------------------------------------------------------

class Worker:
    """One worker process, seen from the caller."""

    def __init__(self, ctx: Any, preload: tuple[str, ...]) -> None:
        self.conn, child = ctx.Pipe(duplex=True)
        self.process = ctx.Process(target=_serve, args=(child, preload), name="sporch-rank-worker", daemon=True)
        self.process.start()
        child.close()

    def is_alive(self) -> bool:
        return self.process.is_alive()

    @property
    def exitcode(self) -> Optional[int]:
        return self.process.exitcode

    def run(self, task_path: Path, out_path: Path, err_path: Path) -> None:
        self.conn.send(("run", str(task_path), str(out_path), str(err_path)))

    def tidied(self, timeout: float) -> bool:
        """Wait up to ``timeout`` for the worker to say it is ready for the next task."""
        deadline = time.monotonic() + timeout
        while True:
            try:
                if not self.conn.poll(max(0.0, deadline - time.monotonic())):
                    return False
                message = self.conn.recv()
            except (EOFError, OSError):
                return False
            if message[0] == "idle":
                return True
            if message[0] == "retire":
                return False

    def stop(self) -> None:
        if self.process.is_alive():
            self.process.terminate()
            self.process.join(5.0)
        if self.process.is_alive():
            self.process.kill()
            self.process.join(2.0)
        with contextlib.suppress(OSError):
            self.conn.close()


class Lease:
    """The workers running one call (task ``i`` on ``workers[i]``), until it ends."""

    def __init__(self, pool: "RankPool", workers: list[Worker], folder: Path) -> None:
        self.pool, self.workers, self.folder = pool, workers, folder
        self.over = False

    def is_alive(self, i: int) -> bool:
        return self.workers[i].is_alive()

    def exitcode(self, i: int) -> Optional[int]:
        return self.workers[i].exitcode

    def returned(self, i: int) -> bool:
        """A task that wrote its result is done: its worker lives on."""
        return True

    def release(self) -> None:
        """Every task returned: each worker goes back to the pool once it has tidied up (one that
        does not is replaced)."""
        if not self.over:
            self._end([w for w in self.workers if w.tidied(TIDY_TIMEOUT_S)])

    def stop(self) -> None:
        """The call failed or timed out: workers already tidied go back, the rest are stopped
        and replaced."""
        if not self.over:
            self._end([w for w in self.workers if w.is_alive() and w.tidied(0.0)])

    def _end(self, reusable: list[Worker]) -> None:
        self.over = True
        self.pool.returned(self.workers, reusable)
        for i in range(len(self.workers)):
            for name, fd in ((f"task{i}.out", 1), (f"task{i}.err", 2)):
                with contextlib.suppress(OSError):
                    data = (self.folder / name).read_bytes()
                    if data:
                        os.write(fd, data)
        shutil.rmtree(self.folder, ignore_errors=True)


class RankPool:
    """Workers kept between calls; started as calls need them (none before the first)."""

    def __init__(self, preload: Sequence[str] = DEFAULT_PRELOAD) -> None:
        self.preload = tuple(preload)
        self._ctx = mp.get_context("spawn")
        self._idle: list[Worker] = []
        self._all: list[Worker] = []
        self._lock = threading.Lock()
        self._folder = Path(tempfile.mkdtemp(prefix="sporch-rank-pool-"))
        self._calls = 0
        self.started = 0  #: workers started so far (replacements included)
        self.closed = False

    @contextlib.contextmanager
    def serving(self) -> Iterator["RankPool"]:
        """Within this block (this thread or task's context), run_distributed uses the pool."""
        token = _SERVING.set(self)
        try:
            yield self
        finally:
            _SERVING.reset(token)

    def start(self, target: Callable[..., Any], args_per_task: Sequence[tuple]) -> Lease:
        """Run ``target(*args)`` for each of ``args_per_task``, each on its own worker; returns at
        once. What cannot be pickled raises here, before any worker is taken."""
        calls = [pickle.dumps((target, tuple(args)), protocol=pickle.HIGHEST_PROTOCOL) for args in args_per_task]
        context = {"environ": dict(os.environ), "cwd": os.getcwd(), "sys_path": list(sys.path)}
        with self._lock:
            if self.closed:
                raise RuntimeError("the rank pool is closed")
            self._calls += 1
            folder = self._folder / f"call{self._calls}"
            workers = self._take(len(calls))
        folder.mkdir()
        for i, (worker, call) in enumerate(zip(workers, calls)):
            task = folder / f"task{i}.pkl"
            task.write_bytes(pickle.dumps({**context, "call": call}, protocol=pickle.HIGHEST_PROTOCOL))
            worker.run(task, folder / f"task{i}.out", folder / f"task{i}.err")
        return Lease(self, workers, folder)

    def idle_workers(self) -> int:
        with self._lock:
            return len([w for w in self._idle if w.is_alive()])

    def _take(self, n: int) -> list[Worker]:
        for worker in [w for w in self._idle if not w.is_alive()]:  # ended while idle (killed from outside)
            worker.stop()
            self._idle.remove(worker)
            self._all.remove(worker)
        taken, self._idle = self._idle[:n], self._idle[n:]
        return taken + [self._new() for _ in range(n - len(taken))]

    def _new(self) -> Worker:
        worker = Worker(self._ctx, self.preload)
        self._all.append(worker)
        self.started += 1
        return worker

    def returned(self, workers: list[Worker], reusable: list[Worker]) -> None:
        """A call is over: ``reusable`` go back to the idle list; the others are stopped and
        as many new ones started in their place (they import ``preload`` while tests go on)."""
        with self._lock:
            for worker in workers:
                if worker in reusable and not self.closed:
                    self._idle.append(worker)
                    continue
                worker.stop()
                self._all.remove(worker)
                if not self.closed:
                    self._idle.append(self._new())

    def close(self) -> None:
        """Stop every worker (idle ones exit by themselves, so that their coverage data is kept)."""
        with self._lock:
            self.closed = True
            workers, self._all, self._idle = self._all, [], []
        for worker in workers:
            with contextlib.suppress(OSError, ValueError):
                worker.conn.send(("exit",))
        deadline = time.monotonic() + 10.0
        for worker in workers:
            worker.process.join(max(0.0, deadline - time.monotonic()))
            worker.stop()
        shutil.rmtree(self._folder, ignore_errors=True)
