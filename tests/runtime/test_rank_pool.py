"""sporch.runtime.rank_pool: run_distributed's ranks on workers that start once. A worker is reused
with nothing of its last call left (environment, directory, torch's threads and random state,
process groups, Dynamo, signal handlers, warning filters); one that dies, hangs or leaves a thread
behind is replaced; what a rank prints reaches the caller's output.

The tests use a pool of their own (2 workers), not the session's, so that which worker runs
which rank does not depend on the tests before them.
"""

from __future__ import annotations

import contextvars
import os
import signal
import sys
import time
import warnings

import pytest

from sporch.runtime.rank_pool import RankPool
from sporch.runtime.testing import DistributedTimeout, RankError, run_distributed

LEAK = "SPORCH_POOL_TEST_LEAK"
CALLER = "SPORCH_POOL_TEST_CALLER"


@pytest.fixture(scope="module")
def pool():
    pool = RankPool()
    yield pool
    pool.close()


def _facts() -> dict:
    """What a rank finds when its call starts."""
    import torch
    import torch.distributed as dist

    return {"pid": os.getpid(), "leak": os.environ.get(LEAK), "caller": os.environ.get(CALLER), "cwd": os.getcwd(),
            "path0": sys.path[0], "threads": torch.get_num_threads(), "random": torch.rand(3).tolist(),
            "grad": torch.is_grad_enabled(), "dtype": str(torch.get_default_dtype()),
            "groups": len(dist.distributed_c10d._world.pg_map), "world": dist.get_world_size(),
            "frames": _dynamo_frames(), "usr2_default": signal.getsignal(signal.SIGUSR2) == signal.SIG_DFL,
            "filters": len(warnings.filters)}


def _dynamo_frames() -> int:
    if "torch._dynamo" not in sys.modules:
        return 0
    import torch._dynamo.convert_frame as convert_frame

    return convert_frame.FRAME_COUNTER


def _double(x):
    return x * 2


def _facts_then_mess() -> dict:
    """Report, then change everything a task could leave behind."""
    import faulthandler

    import torch
    import torch.distributed as dist

    facts = _facts()
    os.environ[LEAK] = "left behind"
    os.chdir("/")
    sys.path.insert(0, "/nonexistent-sporch-test")
    torch.set_num_threads(3)
    torch.manual_seed(99)
    torch.set_grad_enabled(False)
    torch.set_default_dtype(torch.float64)
    dist.new_group([0, 1])
    signal.signal(signal.SIGUSR2, lambda *_: None)
    faulthandler.register(signal.SIGTERM, chain=True)
    warnings.simplefilter("error")
    torch.compile(_double, backend="eager")(torch.ones(2))
    assert _dynamo_frames() > 0
    return facts


def test_a_reused_worker_starts_each_call_as_a_fresh_process_would(pool, monkeypatch, tmp_path):
    monkeypatch.setenv(CALLER, "first")
    monkeypatch.chdir(tmp_path)
    with pool.serving():
        first = run_distributed(_facts_then_mess, 2, threads=None)
    monkeypatch.setenv(CALLER, "second")
    monkeypatch.chdir(tmp_path.parent)
    with pool.serving():
        second = run_distributed(_facts_then_mess, 2, threads=None)
    assert pool.started == 2  # the same two workers both times
    assert {f["pid"] for f in first} == {f["pid"] for f in second}
    for a, b in zip(first, second):
        assert (a["caller"], a["cwd"]) == ("first", str(tmp_path))  # the caller's, as it was at the call
        assert (b["caller"], b["cwd"]) == ("second", str(tmp_path.parent))
        assert a["leak"] is None and a["world"] == 2 and a["groups"] == 1 and a["frames"] == 0
        same = ("leak", "path0", "threads", "random", "grad", "dtype", "groups", "world", "frames", "usr2_default",
                "filters")
        assert {k: b[k] for k in same} == {k: a[k] for k in same}


def _die_on(rank):
    import torch.distributed as dist

    if dist.get_rank() == rank:
        os.kill(os.getpid(), signal.SIGKILL)
    time.sleep(600)  # the peer is still busy (outside any collective, so it reports nothing): it is stopped
    return os.getpid()


def _pid():
    return os.getpid()


def test_a_rank_that_dies_is_named_and_its_workers_replaced(pool):
    with pool.serving():
        before = run_distributed(_pid, 2)
        started = pool.started
        with pytest.raises(RankError) as info:
            run_distributed(_die_on, 2, 1, timeout=60)
        assert info.value.rank == 1 and "rank 1 died without reporting an error (exit code -9)" in str(info.value)
        assert pool.started == started + 2  # the dead one and the busy peer, stopped
        after = run_distributed(_pid, 2)
    assert not set(before) & set(after)


def _sleep_on(rank, seconds):
    import torch.distributed as dist

    if dist.get_rank() == rank:
        time.sleep(seconds)
    return os.getpid()


def test_a_rank_that_hangs_is_stopped_and_replaced(pool):
    with pool.serving():
        before = run_distributed(_pid, 2)
        with pytest.raises(DistributedTimeout) as info:
            run_distributed(_sleep_on, 2, 1, 600, timeout=10)  # 10 s: rank 0 answers within it even on two busy cores
        assert info.value.pending == [1]
        after = run_distributed(_pid, 2)
    assert before[1] not in after  # the hung worker was stopped (rank 0's may have gone back)
    with pytest.raises(ProcessLookupError):
        os.kill(before[1], 0)


def _leave_a_thread():
    import threading

    import torch.distributed as dist

    if dist.get_rank() == 0:
        threading.Thread(target=time.sleep, args=(30,), daemon=True, name="left-behind").start()
    return os.getpid()


def test_a_task_that_leaves_a_thread_running_retires_its_worker(pool, capfd):
    with pool.serving():
        started = pool.started
        pids = run_distributed(_leave_a_thread, 2)
        after = run_distributed(_pid, 2)
    assert pool.started == started + 1 and pids[0] not in after and pids[1] in after
    assert "retired: threads left running: left-behind" in capfd.readouterr().err


def _say(word):
    import torch.distributed as dist

    print(f"{word} out from rank {dist.get_rank()}")
    print(f"{word} err from rank {dist.get_rank()}", file=sys.stderr)
    return None


def test_what_a_rank_prints_reaches_the_callers_output(pool, capfd):
    with pool.serving():
        run_distributed(_say, 2, "hello")
    out, err = capfd.readouterr()
    assert "hello out from rank 0" in out and "hello out from rank 1" in out
    assert "hello err from rank 0" in err and "hello err from rank 1" in err


def test_what_cannot_be_pickled_raises_in_the_caller_before_a_worker_is_taken(pool):
    with pool.serving():
        run_distributed(_pid, 2)
        idle = pool.idle_workers()
        with pytest.raises(Exception, match="pickle"):
            run_distributed(lambda: 1, 2)
    assert pool.idle_workers() == idle


def test_without_a_serving_pool_each_rank_is_a_fresh_process():
    """Outside any pool (a context without one: benches, scripts), each call spawns its ranks,
    which end with it."""
    pids = contextvars.Context().run(run_distributed, _pid, 2)
    for p in pids:
        with pytest.raises(ProcessLookupError):
            os.kill(p, 0)


def _peak_after(mib):
    """This process's peak resident set (what a CPU rank reports as peak memory) after holding
    ``mib`` MiB for a moment."""
    import torch

    from sporch.runtime.measure import peak_memory_bytes

    if mib:
        held = torch.ones(mib * 2**20 // 4)
        del held
    return peak_memory_bytes(torch.device("cpu"))


def test_each_call_measures_its_own_peak_memory(pool):
    """A reused worker's peak resident set starts again at each call, as a fresh process's would
    (comparisons of peak memory between two calls stay meaningful)."""
    with pool.serving():
        big = run_distributed(_peak_after, 2, 400)
        small = run_distributed(_peak_after, 2, 0)
    for b, s in zip(big, small):
        assert s < b - 300 * 2**20, (b, s)


def _sharded_linear_rank(groups_before: int) -> int:
    """FSDP2 shards a module made on the meta device over a new group's mesh (as parallel.shard_weights
    does), after ``groups_before`` other groups; the rank its parameter's mesh names (torch caches
    sharding decisions by mesh, and names groups by a count that starts again in each world)."""
    import torch
    import torch.distributed as dist
    from torch.distributed.device_mesh import DeviceMesh
    from torch.distributed.fsdp import fully_shard

    for _ in range(groups_before):
        dist.new_group([0, 1])
    mesh = DeviceMesh.from_group(dist.new_group([0, 1]), "cpu")
    with torch.device("meta"):
        module = torch.nn.Linear(4, 4)
    fully_shard(module, mesh=mesh)
    module.to_empty(device="cpu")
    return module.weight.device_mesh.get_local_rank()


def test_dtensor_caches_keyed_by_an_earlier_calls_mesh_are_forgotten(pool):
    """An equal mesh of a later call must not be served the earlier call's cached decisions,
    whose process groups are gone ("Could not resolve the process group registered under the
    name ..." from a reused worker)."""
    with pool.serving():
        assert run_distributed(_sharded_linear_rank, 2, 5) == [0, 1]
        assert run_distributed(_sharded_linear_rank, 2, 0) == [0, 1]  # its mesh's group: another name
