"""sporch.runtime.testing.run_distributed: results by rank, failures named, no hangs (on the
session's rank pool; tests/runtime/test_rank_pool.py: the pool itself, and fresh processes)."""

from __future__ import annotations

import time

import pytest

from sporch.runtime.testing import DistributedTimeout, RankError, run_distributed


def _sum_ranks(scale):
    import torch
    import torch.distributed as dist

    x = torch.tensor([float(dist.get_rank())])
    dist.all_reduce(x)
    return dist.get_rank(), dist.get_world_size(), x.item() * scale, torch.get_num_threads()


def _raise_on(rank):
    import torch.distributed as dist

    if dist.get_rank() == rank:
        raise KeyError("boom on purpose")
    dist.barrier()  # the others wait on the failed rank: they must be torn down
    return "unreachable"


def _sleep_on(rank, seconds):
    import torch.distributed as dist

    if dist.get_rank() == rank:
        time.sleep(seconds)
    return dist.get_rank()


def test_results_by_rank_with_kwargs():
    out = run_distributed(_sum_ranks, 3, scale=2.0, timeout=60)
    assert [o[0] for o in out] == [0, 1, 2]
    assert all(o[1] == 3 and o[2] == 6.0 and o[3] == 1 for o in out)


def test_exception_names_the_rank_and_tears_down():
    with pytest.raises(RankError) as info:
        run_distributed(_raise_on, 3, 1, timeout=60)
    err = info.value
    assert err.rank == 1
    assert "rank 1 raised KeyError" in str(err)
    assert isinstance(err.original, KeyError)
    assert isinstance(err.__cause__, KeyError)
    assert "boom on purpose" in err.remote_traceback


def test_timeout_names_pending_ranks():
    """Rank 1 sleeps past the timeout: it alone is named. The timeout counts from the moment
    every rank has joined (starting Python and torch on a loaded machine is not counted), so
    rank 0, which returns at once, is done well within it."""
    with pytest.raises(DistributedTimeout) as info:
        run_distributed(_sleep_on, 2, 1, 120, timeout=10)
    assert info.value.pending == [1]
    assert "ranks still running: [1]" in str(info.value)
