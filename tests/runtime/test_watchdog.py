"""The collective watchdog in one process (issue 19 item 4): two "ranks" share a store and a job
folder; one waits in a collective past the timeout, the other is in none. No torch.distributed:
the real processes are in tests/runtime/launch/test_hang_watchdog.py."""

from __future__ import annotations

import json
import os
import sys
import threading
import time
from pathlib import Path

import pytest

from sporch.orchestrator.contract.exit_codes import EXIT_HUNG
from sporch.runtime.faults import hang_before
import sporch.runtime.watchdog.collectives as watchdog_collectives
from sporch.runtime.watchdog.thread import Watchdog, job_timeout_s


class FakeStore:
    """The c10d Store calls the watchdog makes (set, add, check, get), thread-safe."""

    def __init__(self) -> None:
        self.data: dict[str, bytes] = {}
        self.lock = threading.Lock()

    def set(self, key, value):
        with self.lock:
            self.data[key] = str(value).encode()

    def add(self, key, n):
        with self.lock:
            value = int(self.data.get(key, b"0")) + n
            self.data[key] = str(value).encode()
            return value

    def check(self, keys):
        with self.lock:
            return all(k in self.data for k in keys)

    def get(self, key):
        with self.lock:
            return self.data[key]


def test_a_timed_out_collective_writes_every_ranks_stack_and_names_the_absent_rank(tmp_path):
    store, exits, hangs, diagnoses = FakeStore(), [], {}, []

    def make(rank):
        return Watchdog(rank=rank, world_size=2, timeout_s=0.5, folder=tmp_path, host=f"node{rank + 1}", node=rank,
                        store=store, poll_s=0.05, grace_s=5, exit_fn=exits.append,
                        on_hang=lambda rec, r=rank: hangs.__setitem__(r, rec),
                        on_diagnosis=diagnoses.append if rank == 0 else None)

    wd0, wd1 = make(0), make(1)
    with wd1.collective("new_groups", kind="new_group"):
        pass
    wd0.step = 2
    wd0.start(), wd1.start()
    with wd0.collective("ulysses_qkv", [0, 1], kind="all_to_all", group="ulysses", layer=3) as rec:
        deadline = time.monotonic() + 20
        while len(exits) < 2 and time.monotonic() < deadline:
            time.sleep(0.05)
    assert exits == [EXIT_HUNG, EXIT_HUNG] and rec.seq == 1
    assert hangs[0]["state"] == "timeout" and hangs[1]["state"] == "alerted"
    assert hangs[0]["collective"]["name"] == "ulysses_qkv" and hangs[0]["collective"]["step"] == 2
    assert hangs[1]["collective"] is None and hangs[1]["last"]["name"] == "new_groups"
    for rank in (0, 1):
        assert json.loads((tmp_path / "hang" / f"rank{rank}.json").read_text())["rank"] == rank
        text = (tmp_path / "hang" / f"rank{rank}.txt").read_text()
        assert "Python stacks of every thread" in text and "test_watchdog.py" in text
    assert "timeout: waited" in (tmp_path / "hang" / "rank0.txt").read_text()
    assert "ulysses_qkv (all_to_all, collective #1 of ulysses group [0,1], layer 3, step 2)" in \
        (tmp_path / "hang" / "rank0.txt").read_text()
    [d] = diagnoses
    assert d.never_arrived == [1] and d.line.startswith("rank 1 (node2) never arrived at ulysses_qkv")
    assert wd0.fired and wd1.fired


def test_a_healthy_rank_writes_nothing_and_stops(tmp_path):
    wd = Watchdog(rank=0, world_size=1, timeout_s=600, folder=tmp_path, store=FakeStore(), poll_s=0.05,
                  exit_fn=lambda code: pytest.fail("fired"))
    wd.start()
    for _ in range(3):
        with wd.collective("ring_kv", [0], kind="p2p", group="ring"):
            time.sleep(0.01)
    wd.stop()
    assert not (tmp_path / "hang").exists() and wd.last.seq == 3 and wd.current is None and wd.entered == 3


class CountingStore(FakeStore):
    """A FakeStore that records every call made to it."""

    def __init__(self) -> None:
        super().__init__()
        self.calls: list[str] = []

    def __getattribute__(self, name):
        if name in ("set", "add", "check", "get"):
            object.__getattribute__(self, "calls").append(name)
        return object.__getattribute__(self, name)


#: Everything entering and leaving a collective may call (sys.setprofile's view): the watchdog's
#: own code (collective(), the two records' constructors, enter, exit), the group's counter
#: (dict.get) and the two clock reads. No other module's Python code (no store, no file, no lock,
#: no thread wake, no logging) and no other builtin.
HOT_PATH_PY = {Watchdog.collective.__qualname__, "Collective.__init__", "_Watch.__init__", "_Watch.__enter__",
               "_Watch.__exit__"}
HOT_PATH_C = {"dict.get", "time.time", "time.monotonic"}
#: The watchdog package's folder: a prefix of the paths of its own code.
WATCHDOG_SOURCE = str(Path(watchdog_collectives.__file__).parent) + os.sep


def _calls_of(block) -> list[tuple[str, str]]:
    """What ``block()`` calls, in order, as (kind, qualified name): "py" for Python functions
    (with their file), "c" for builtins (with their module or type)."""
    seen: list[tuple[str, str]] = []

    def profile(frame, event, arg):
        if event == "call" and frame.f_code is not block.__code__:
            seen.append(("py", f"{frame.f_code.co_filename}:{frame.f_code.co_qualname}"))
        elif event == "c_call":
            owner = getattr(arg, "__module__", None) or type(getattr(arg, "__self__", None)).__name__
            seen.append(("c", f"{owner}.{arg.__name__}" if owner != "builtins" else arg.__qualname__))

    sys.setprofile(profile)
    try:
        block()
    finally:
        sys.setprofile(None)
    return [c for c in seen if c != ("c", "sys.setprofile")]


def test_entering_a_collective_writes_nothing_and_calls_only_the_watchdog(tmp_path):
    """Why entering a collective is cheap, counted instead of timed (a timing flips with the
    machine's load; bench/watchdog_overhead.py prints the microseconds): a healthy rank's
    collective touches neither the store nor the job folder nor the watchdog's thread, calls only
    the watchdog's own code and three builtins, the same calls every time (nothing accumulates),
    and keeps one counter per group."""
    store = CountingStore()
    wd = Watchdog(rank=0, world_size=4, timeout_s=60, folder=tmp_path, host="node1", store=store,
                  exit_fn=lambda code: pytest.fail("fired"), on_hang=lambda rec: pytest.fail("hang recorded"))
    n = 50

    def enter_n():
        for _ in range(n):
            with wd.collective("ulysses_qkv", [0, 1, 2, 3], kind="all_to_all", group="ulysses", layer=1):
                pass

    calls = _calls_of(enter_n)
    own = WATCHDOG_SOURCE
    py = {name.split(":", 1)[1] for kind, name in calls if kind == "py" and name.startswith(own)}
    foreign = [name for kind, name in calls if kind == "py" and not name.startswith(own)]
    builtins = {name for kind, name in calls if kind == "c"}
    assert not foreign, foreign  # e.g. the store's methods, threading, os, json
    assert py <= HOT_PATH_PY and builtins <= HOT_PATH_C, (py - HOT_PATH_PY, builtins - HOT_PATH_C)
    assert len(calls) % n == 0 and calls == calls[: len(calls) // n] * n  # the same calls every time
    assert store.calls == [] and list(tmp_path.iterdir()) == []
    assert wd.entered == n and wd.last.seq == n and wd.current is None
    assert len(wd._seq) == 1 and not wd.pending and wd._thread is None


def test_completed_asynchronous_collectives_do_not_pile_up():
    """With a marker (NCCL) and no watchdog thread to drain them, the main thread drops the
    completed collectives itself once PENDING_PRUNE wait: memory stays bounded."""
    prune = watchdog_collectives.PENDING_PRUNE
    finished = threading.Event()
    finished.set()
    wd = Watchdog(rank=0, world_size=1, timeout_s=60, marker=lambda: Marker(finished))
    for _ in range(prune + 2):
        with wd.collective("ring_kv", [0], kind="p2p", group="ring"):
            pass
    assert len(wd.pending) <= prune and wd.last.seq == prune + 1


def test_fault_injection_and_the_timeout_from_the_environment():
    env = {"SPORCH_FAULT_HANG_RANK": "3", "SPORCH_FAULT_HANG_BEFORE": "all_to_all", "SPORCH_FAULT_HANG_S": "7"}
    assert hang_before(3, env) == ("all_to_all", 7.0)
    assert hang_before(2, env) is None
    assert hang_before(3, {"SPORCH_FAULT_HANG_RANK": "3"}) is None  # both variables, or nothing
    assert job_timeout_s(None, "00:10:00", {}) == 150.0
    assert job_timeout_s(30, "00:10:00", {"SPORCH_COLLECTIVE_TIMEOUT_S": "12"}) == 12.0
    slept = []
    wd = Watchdog(rank=3, world_size=4, timeout_s=60, environ=env)
    module = watchdog_collectives
    real, module._injected_hang = module._injected_hang, slept.append
    try:
        with wd.collective("gather_sequence", kind="all_gather"):
            pass
        with wd.collective("ulysses_qkv", kind="all_to_all"):
            pass
        with wd.collective("ulysses_out", kind="all_to_all"):
            pass
    finally:
        module._injected_hang = real
    assert slept == [7.0]  # once, before the first all-to-all


class Marker:
    """A CUDA event's stand-in: ``query()`` is True once the test says the collective finished."""

    def __init__(self, done: threading.Event) -> None:
        self.done = done

    def query(self) -> bool:
        return self.done.is_set()


def test_an_asynchronous_collective_stays_the_ranks_until_its_marker_completes(tmp_path):
    """NCCL only enqueues: the call returns at once and the rank blocks later. The collective is
    the rank's until the marker after it completes; one that never does times out as if the
    rank were still in the call."""
    finished, exits, hangs = threading.Event(), [], []
    # a timeout no pause of this thread reaches while the first collective waits for its marker
    wd = Watchdog(rank=0, world_size=1, timeout_s=600, folder=tmp_path, store=FakeStore(), poll_s=0.05,
                  grace_s=1, exit_fn=exits.append, on_hang=hangs.append, marker=lambda: Marker(finished))
    wd.start()
    with wd.collective("ulysses_qkv", [0], kind="all_to_all", group="ulysses", layer=0):
        pass
    assert wd.current is None and wd.waiting_in().name == "ulysses_qkv"
    finished.set()  # the first one completes on the device: the watchdog's thread drops it ...
    deadline = time.monotonic() + 10
    while wd.waiting_in() is not None and time.monotonic() < deadline:
        time.sleep(0.02)
    assert wd.waiting_in() is None and wd.last.name == "ulysses_qkv" and not exits
    wd.timeout_s = 0.6
    never = threading.Event()
    wd.marker = lambda: Marker(never)
    with wd.collective("ulysses_out", [0], kind="all_to_all", group="ulysses", layer=0):
        pass
    deadline = time.monotonic() + 10  # ... the second never does
    while not exits and time.monotonic() < deadline:
        time.sleep(0.05)
    assert exits == [EXIT_HUNG]
    assert hangs[0]["state"] == "timeout" and hangs[0]["collective"]["name"] == "ulysses_out"
    assert hangs[0]["last"]["name"] == "ulysses_qkv"
