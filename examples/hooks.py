"""Test entrypoints for job.yaml's ``entrypoint: "examples.hooks:NAME"``.

The runtime calls ``NAME(ctx, plan)`` on every rank (runtime/workloads.py) with the
ParallelContext and the Plan. Ranks import this module, so the repository root must be on
their ``PYTHONPATH`` (jobs inherit the submitter's environment; they also start in the
submitter's directory).

Knobs come from the environment (Slurm exports the submitter's):

- ``SPORCH_FAIL_RANK`` (default 1): the rank that raises in :func:`fail_on_rank`;
- ``SPORCH_HANG_S`` (default 300): how long the other ranks sleep in :func:`fail_on_rank`
  (so only ``srun --kill-on-bad-exit`` ends the job quickly);
- ``SPORCH_SLEEP_S`` (default 60): how long :func:`sleep` sleeps;
- ``SPORCH_DIE_RANK`` (default 1): the rank that kills itself with SIGKILL in :func:`die_on_rank`.
"""

from __future__ import annotations

import os
import socket
import time
from typing import Any


def _rank(ctx: Any) -> int:
    rank = getattr(ctx, "rank", None)
    return int(rank if rank is not None else os.environ.get("SLURM_PROCID", "0"))


def fail_on_rank(ctx: Any, plan: Any) -> dict:
    """Rank ``$SPORCH_FAIL_RANK`` raises at once; every other rank hangs."""
    rank = _rank(ctx)
    bad = int(os.environ.get("SPORCH_FAIL_RANK", "1"))
    if rank == bad:
        raise RuntimeError(f"injected failure on rank {rank} ({socket.gethostname()})")
    time.sleep(float(os.environ.get("SPORCH_HANG_S", "300")))
    return {"hung": True}


def die_on_rank(ctx: Any, plan: Any) -> dict:
    """Rank ``$SPORCH_DIE_RANK`` kills itself with SIGKILL (it writes no record, as a rank the
    kernel's OOM killer ends); the others wait for it in a collective and lose their connection."""
    import signal

    import torch
    import torch.distributed as dist

    dist.barrier()
    if _rank(ctx) == int(os.environ.get("SPORCH_DIE_RANK", "1")):
        os.kill(os.getpid(), signal.SIGKILL)
    dist.all_reduce(torch.ones(1))
    return {}


def sleep(ctx: Any, plan: Any) -> dict:
    """Every rank sleeps ``$SPORCH_SLEEP_S`` seconds (a job to cancel or requeue)."""
    seconds = float(os.environ.get("SPORCH_SLEEP_S", "60"))
    time.sleep(seconds)
    return {"slept_s": seconds, "rank": _rank(ctx)}


def hello(ctx: Any, plan: Any) -> dict:
    """Return where this rank ran (a fast smoke test)."""
    return {"rank": _rank(ctx), "host": socket.gethostname()}
