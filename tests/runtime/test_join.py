"""Joining the job's ranks before the process group is made (runtime/distributed.py): ranks that
start apart (imports on a shared file system, a late node) must not fail a process group whose
timeout is short; a rank that never comes is named."""

from __future__ import annotations

import datetime
import multiprocessing
import os
import time

import pytest
import torch.distributed as dist

from sporch.runtime.distributed import JOINED_KEY, JOINED_RANK_KEY, JoinError, wait_for_every_rank

#: The process group's timeout in the skew test, and how far apart the ranks reach the rendezvous.
PG_TIMEOUT_S = 2
SKEW_S = 6


def _rank(rank: int, world_size: int, store_path: str, out: str) -> None:
    import torch

    from sporch.runtime.distributed import init_distributed, shutdown
    from sporch.runtime.rank_env import RankEnv

    os.environ["SPORCH_INIT_METHOD"] = "file://" + store_path
    if rank == 1:
        time.sleep(SKEW_S)  # a rank that starts late, by more than the process group's timeout
    env = RankEnv(rank=rank, local_rank=rank, node_rank=0, world_size=world_size, master_addr="127.0.0.1",
                  master_port=29500, hostname="localhost", source="torchrun")
    backend = init_distributed(env, torch.device("cpu"), timeout_s=PG_TIMEOUT_S, join_timeout_s=120)
    x = torch.tensor([float(rank + 1)])
    dist.all_reduce(x)
    with open(out + f".{rank}", "w") as fh:
        fh.write(f"{backend} {x.item()} {dist.get_world_size()}")
    shutdown()


def test_ranks_that_start_further_apart_than_the_timeout_still_form_the_group(tmp_path):
    """Rank 1 reaches the rendezvous SKEW_S after rank 0, three times the process group's
    timeout: before the join, rank 0's init_process_group gave up waiting for it."""
    ctx = multiprocessing.get_context("spawn")
    procs = [ctx.Process(target=_rank, args=(r, 2, str(tmp_path / "store"), str(tmp_path / "out"))) for r in range(2)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(180)
    assert [p.exitcode for p in procs] == [0, 0]
    assert [(tmp_path / f"out.{r}").read_text() for r in range(2)] == ["gloo 3.0 2"] * 2


def test_a_rank_that_never_comes_is_named(tmp_path):
    store = dist.FileStore(str(tmp_path / "store"), 3)
    store.set_timeout(datetime.timedelta(seconds=1))
    other = dist.FileStore(str(tmp_path / "store"), 3)  # rank 2 arrives; rank 1 never does
    other.set(JOINED_RANK_KEY.format(rank=2), "1")
    other.add(JOINED_KEY, 1)
    with pytest.raises(JoinError, match=r"rank 0: rank\(s\) 1 of 3 did not reach the rendezvous within 1 s"):
        wait_for_every_rank(store, 0, 3, 1)


def test_every_rank_arrived_passes(tmp_path):
    """Both ranks arrive (two threads, one store file): each returns; the count is the world."""
    import threading

    stores = [dist.FileStore(str(tmp_path / "store"), 2) for _ in range(2)]
    errors = []

    def arrive(rank):
        stores[rank].set_timeout(datetime.timedelta(seconds=60))
        try:
            wait_for_every_rank(stores[rank], rank, 2, 60)
        except Exception as exc:  # noqa: BLE001 - reported below
            errors.append(exc)

    threads = [threading.Thread(target=arrive, args=(r,)) for r in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(90)
    assert errors == [] and not any(t.is_alive() for t in threads)
    assert stores[0].add(JOINED_KEY, 0) == 2
