"""Uneven sequence split and gather for the generic (diffusers) path.

A tensor of ``n`` tokens is split over the ``P`` ranks of the sequence group as
``torch.tensor_split`` does (the first ``n % P`` ranks hold one token more; no padding), so the
model's per-token work never sees a padded token. Attention pads the chunks to one length
itself and masks the padding (``usp_attention(key_mask=)``); :func:`gather_uneven` puts the
chunks back together.
"""

from __future__ import annotations

import torch
import torch.distributed as dist

from sporch.orchestrator.models.families.plan_format import SplitPlan, splits_text
from sporch.orchestrator.contract.parallel import sequence_chunks
from sporch.runtime.parallel import ParallelContext

__all__ = ["chunk_sizes", "check_recorded_split", "split_local", "gather_uneven", "all_lengths"]


def chunk_sizes(n: int, parts: int) -> list[int]:
    """Tokens per rank: the first ``n % parts`` ranks get one more (``torch.tensor_split``; the
    planner's ``contract.parallel.sequence_chunks``, the one rule both use)."""
    return sequence_chunks(n, parts)


def check_recorded_split(sequence, plan: SplitPlan, class_name: str, degree: int | None = None) -> None:
    """The plan's record of how this path cuts the sequence (``plan.sequence``: ``split`` and
    ``text_len``, which its memory and time lines assume) against what the split plan does:
    unpadded chunks, the text cut with the image's exactly when the split plan cuts it. A plan
    made for another path raises ValueError naming both. ``degree``: this run's sequence ranks,
    which the record's ``degree`` and longest chunk (``tokens_per_rank``) must describe (the chunks
    :func:`split_local` cuts are ``plan.sequence.chunks()``)."""
    text = bool(getattr(sequence, "text_len", 0))
    if getattr(sequence, "split", "padded") != "uneven" or text != splits_text(plan):
        raise ValueError(f"plan.sequence records split {getattr(sequence, 'split', None)!r} with text_len "
                         f"{getattr(sequence, 'text_len', None)}, but the one model path cuts {class_name} unpadded "
                         f"(uneven) with its text {'cut' if splits_text(plan) else 'whole'}: re-plan the job")
    if degree is not None and (sequence.degree != degree
                               or sequence.tokens_per_rank != max(chunk_sizes(sequence.seq_len, degree))):
        raise ValueError(f"plan.sequence records {sequence.seq_len} tokens over {sequence.degree} ranks "
                         f"({sequence.tokens_per_rank} on the longest), but this run cuts them over {degree} "
                         f"sequence ranks as {chunk_sizes(sequence.seq_len, degree)}: re-plan the job (sporch plan)")


def split_local(x: torch.Tensor, dim: int, ctx: ParallelContext) -> torch.Tensor:
    """This rank's chunk of ``x`` along ``dim`` (chunk index = ``ctx.sequence_rank``). Local."""
    dim = dim % x.dim()
    sizes = chunk_sizes(x.shape[dim], ctx.sequence_size)
    start = sum(sizes[:ctx.sequence_rank])
    return x.narrow(dim, start, sizes[ctx.sequence_rank])


def all_lengths(lengths: list[int], ctx: ParallelContext) -> list[list[int]]:
    """Every sequence rank's ``lengths`` (one small all-gather), in sequence-rank order."""
    mine = torch.tensor(lengths, dtype=torch.long, device=ctx.device)
    parts = [torch.empty_like(mine) for _ in range(ctx.sequence_size)]
    with ctx.guard(), ctx.collective("sequence_lengths", "sequence", kind="all_gather"):
        dist.all_gather(parts, mine, group=ctx.sequence_group)
    return [[int(v) for v in p.tolist()] for p in parts]


def gather_uneven(x: torch.Tensor, dim: int, ctx: ParallelContext, sizes: list[int] | None = None) -> torch.Tensor:
    """The whole tensor along ``dim`` from the sequence group's chunks (every rank gets it).
    ``sizes``: every rank's chunk length, when known (else one small all-gather finds them)."""
    dim = dim % x.dim()
    if sizes is None:
        sizes = [s[0] for s in all_lengths([x.shape[dim]], ctx)]
    longest = max(sizes)
    x = x.contiguous()
    if x.shape[dim] < longest:
        pad = list(x.shape)
        pad[dim] = longest - x.shape[dim]
        x = torch.cat([x, x.new_zeros(pad)], dim=dim)
    parts = [torch.empty_like(x) for _ in sizes]
    with ctx.guard(), ctx.collective("gather_sequence", "sequence", kind="all_gather"):
        dist.all_gather(parts, x, group=ctx.sequence_group)
    return torch.cat([p.narrow(dim, 0, n) for p, n in zip(parts, sizes)], dim=dim)
