"""One dp replica's leader and how what it has reaches the rest of the replica.

The leader (cfg rank 0, sequence rank 0) encodes the prompts, decides what is already done
and decodes; :func:`share_from_leader` hands its object to every rank of the replica in two
broadcasts (over the leader's cfg group, then over every sequence group), never to other
replicas. An exception in the payload is raised on every rank of the replica, so no rank
waits forever for a leader that failed.
"""

from __future__ import annotations

from typing import Any, Callable

import torch.distributed as dist

from sporch.runtime.parallel import ParallelContext


def is_leader(ctx: ParallelContext | None) -> bool:
    """The rank that encodes and decodes for its dp replica."""
    return ctx is None or (ctx.cfg_rank == 0 and ctx.sequence_rank == 0)


def share_from_leader(ctx: ParallelContext | None, produce: Callable[[], Any], what: str) -> Any:
    """``produce()``, run on the leader only, on every rank of its replica; an exception it
    raises is raised everywhere (``what`` names the step in the others' error)."""
    box: list[Any] = [None]
    if is_leader(ctx):
        try:
            box[0] = produce()
        except Exception as exc:  # noqa: BLE001 - shipped to the replica, then re-raised
            box[0] = exc
    if ctx is not None:
        if ctx.sequence_rank == 0 and ctx.cfg > 1:
            with ctx.guard():
                dist.broadcast_object_list(box, src=ctx.group_ranks("cfg")[0], group=ctx.cfg_group)
        if ctx.sequence_size > 1:
            with ctx.guard():
                dist.broadcast_object_list(box, src=ctx.group_ranks("sequence")[0], group=ctx.sequence_group)
    if isinstance(box[0], BaseException):
        if is_leader(ctx):
            raise box[0]
        raise RuntimeError(f"{what} failed on this replica's leader: {box[0]}")
    return box[0]
