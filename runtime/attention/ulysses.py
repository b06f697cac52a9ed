"""Ulysses all-to-all verbs: scatter heads / gather sequence, and back.

Head ranges: Ulysses rank ``j`` owns query heads ``q_ranges[j] = (start, stop)`` (uneven
when heads do not divide: the first ``H % U`` ranks get one extra) and the KV heads its
query heads need, ``kv_ranges[j]`` (query head ``h`` uses KV head ``h // (H // Hkv)``): KV
heads are split when ``Hkv % U == 0`` and sent only to the ranks that need them otherwise
(replicated exactly as often as needed). All exchanges use ``all_to_all_single`` with
explicit (possibly uneven) split sizes, which gloo supports on CPU.

Internal layout after the exchange is ``[B, H_local, S, D]`` (what the kernels take).
"""

from __future__ import annotations

from typing import Sequence

import torch
import torch.distributed as dist

from sporch.orchestrator.contract.parallel import head_split
from sporch.runtime.attention.comm_stats import CommStats
from sporch.runtime.parallel import ParallelContext, head_offsets

__all__ = ["head_ranges", "qkv_in", "out_back", "exchange_heads", "gather_seq_scatter_heads",
           "gather_heads_scatter_seq"]


def head_ranges(num_heads: int, num_kv_heads: int, parts: int,
                counts: Sequence[int] | None = None) -> tuple[list[tuple[int, int]], list[tuple[int, int]]]:
    """``(q_ranges, kv_ranges)``: the query heads and the KV heads each of ``parts`` ranks owns.
    ``counts``: the query heads per rank a Plan recorded (``plan.heads.q_heads_per_rank``), used
    as recorded; None (no Plan): :func:`~sporch.orchestrator.contract.parallel.head_split`."""
    if num_heads % num_kv_heads:
        raise ValueError(f"num_heads {num_heads} is not a multiple of num_kv_heads {num_kv_heads}")
    if counts is None:
        counts = head_split(num_heads, parts)
    elif len(counts) != parts or sum(counts) != num_heads:
        raise ValueError(f"plan.heads records query heads per Ulysses rank {list(counts)} ({sum(counts)} heads over "
                         f"{len(counts)} ranks), but the attention has {num_heads} heads over {parts} ranks: "
                         "re-plan the job (sporch plan) for this model and layout")
    counts = [int(c) for c in counts]
    if min(counts) == 0:
        raise ValueError(f"{num_heads} heads cannot be split over {parts} Ulysses ranks (a rank would get none)")
    g = num_heads // num_kv_heads
    q_ranges = [(s, s + c) for s, c in zip(head_offsets(counts), counts)]
    kv_ranges = [(s // g, (e - 1) // g + 1) for s, e in q_ranges]
    return q_ranges, kv_ranges


def _nbytes(t: torch.Tensor) -> int:
    return t.numel() * t.element_size()


def _a2a(recv: torch.Tensor, send: torch.Tensor, out_splits: list[int], in_splits: list[int], group,
         me: int, stats: CommStats | None, name: str) -> None:
    """all_to_all_single split along dim 0; counts the bytes addressed to other ranks."""
    dist.all_to_all_single(recv, send, out_splits, in_splits, group=group)
    if stats is not None:
        unit = _nbytes(send) // max(1, send.shape[0])
        stats.add(name, (sum(in_splits) - in_splits[me]) * unit)


def qkv_in(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, group, me: int, q_ranges, kv_ranges,
           stats: CommStats | None = None) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """q ``[B, L, H, D]``, k/v ``[B, L, Hkv, D]`` (this rank's sequence chunk, all heads) ->
    ``[B, h, U*L, D]`` each (the Ulysses group's whole sequence, this rank's heads).

    One all-to-all when q, k, v share dtype and head dim (three otherwise). The send buffer
    holds, per destination, ``[B, L, h_q + 2 h_kv, D]``; received, the pieces are viewed (for
    B == 1 without a copy) as ``[B, h, U*L, D]`` with a sequence stride of ``rows * D``, which
    the kernels take as is."""
    U = len(q_ranges)
    B, L = q.shape[0], q.shape[1]
    if U == 1:
        return q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2)
    packable = q.dtype == k.dtype == v.dtype and q.shape[-1] == k.shape[-1] == v.shape[-1]
    tensors = (q, k, v)
    ranges_of = (q_ranges, kv_ranges, kv_ranges)
    outs: list[torch.Tensor] = []
    for index in ([0, 1, 2],) if packable else ([0], [1], [2]):
        members = [tensors[i] for i in index]
        D = members[0].shape[-1]
        counts = [[ranges_of[i][j][1] - ranges_of[i][j][0] for i in index] for j in range(U)]
        rows = [sum(c) for c in counts]
        unit = B * L * D
        send = members[0].new_empty(sum(rows) * unit)
        off = 0
        for j in range(U):
            blk = send[off:off + rows[j] * unit].view(B, L, rows[j], D)
            col = 0
            for t, i in zip(members, index):
                s, e = ranges_of[i][j]
                blk[:, :, col:col + e - s].copy_(t[:, :, s:e])
                col += e - s
            off += rows[j] * unit
        recv = send.new_empty(U * rows[me] * unit)
        dist.all_to_all_single(recv, send, [rows[me] * unit] * U, [r * unit for r in rows], group=group)
        if stats is not None:
            stats.add("ulysses_qkv", (sum(rows) - rows[me]) * unit * send.element_size())
        r = recv.view(U, B, L, rows[me], D)
        col = 0
        for n in counts[me]:
            outs.append(r[:, :, :, col:col + n].permute(1, 3, 0, 2, 4).reshape(B, n, U * L, D))
            col += n
    return outs[0], outs[1], outs[2]


def out_back(o: torch.Tensor, group, me: int, q_ranges, stats: CommStats | None = None,
             dtype: torch.dtype | None = None) -> torch.Tensor:
    """``[B, h, U*L, D]`` (this rank's heads, the group's sequence) -> ``[B, L, H, D]``
    (this rank's sequence chunk, all heads), cast to ``dtype`` on the way (one copy)."""
    U = len(q_ranges)
    B, h, S, D = o.shape
    dtype = o.dtype if dtype is None else dtype
    if U == 1:
        out = torch.empty((B, S, h, D), dtype=dtype, device=o.device)
        out.copy_(o.transpose(1, 2))
        return out
    L = S // U
    send = torch.empty((U, B, L, h, D), dtype=dtype, device=o.device)
    send.copy_(o.reshape(B, h, U, L, D).permute(2, 0, 3, 1, 4))
    counts = [e - s for s, e in q_ranges]
    unit = B * L * D
    recv = send.new_empty(sum(counts) * unit)
    dist.all_to_all_single(recv, send.view(-1), [c * unit for c in counts], [h * unit] * U, group=group)
    if stats is not None:
        stats.add("ulysses_out", (U - 1) * h * unit * send.element_size())
    H = sum(counts)
    out = torch.empty((B, L, H, D), dtype=dtype, device=o.device)
    off = 0
    for (s, e), c in zip(q_ranges, counts):
        out[:, :, s:e].copy_(recv[off:off + c * unit].view(B, L, c, D))
        off += c * unit
    return out


def exchange_heads(x: torch.Tensor, group, me: int, q_ranges, stats: CommStats | None = None,
                   name: str = "ulysses_joint_out") -> torch.Tensor:
    """All-gather of head slices ``[B, h, T, D]`` (uneven allowed) -> ``[B, T, H, D]`` on every rank."""
    U = len(q_ranges)
    if U == 1:
        return x.transpose(1, 2).contiguous()
    B, h, T, D = x.shape
    piece = x.permute(1, 0, 2, 3).contiguous()  # [h, B, T, D]
    send = piece.repeat(U, 1, 1, 1)
    H = q_ranges[-1][1]
    recv = x.new_empty((H, B, T, D))
    _a2a(recv, send, [e - s for s, e in q_ranges], [h] * U, group, me, stats, name)
    return recv.permute(1, 2, 0, 3).contiguous()


# -- verl-style public verbs (sequence-sharded [B, S, H, D] tensors) ------------------------

def gather_seq_scatter_heads(x: torch.Tensor, ctx: ParallelContext, *, stats: CommStats | None = None) -> torch.Tensor:
    """``[B, L, H, D]`` (sequence chunk, all heads) -> ``[B, U*L, h, D]`` over ``ctx``'s Ulysses group."""
    q_ranges, _ = head_ranges(x.shape[2], x.shape[2], ctx.ulysses)
    me = ctx.ulysses_rank
    if ctx.ulysses == 1:
        return x
    xt = x.permute(2, 0, 1, 3)
    send = torch.cat([xt[s:e] for s, e in q_ranges], 0)
    n = q_ranges[me][1] - q_ranges[me][0]
    recv = send.new_empty((ctx.ulysses * n,) + tuple(send.shape[1:]))
    _a2a(recv, send, [n] * ctx.ulysses, [e - s for s, e in q_ranges], ctx.ulysses_group, me, stats,
         "ulysses_gather_seq")
    B, L, D = x.shape[0], x.shape[1], x.shape[3]
    return recv.view(ctx.ulysses, n, B, L, D).permute(2, 0, 3, 1, 4).reshape(B, ctx.ulysses * L, n, D)


def gather_heads_scatter_seq(x: torch.Tensor, ctx: ParallelContext, num_heads: int, *, stats: CommStats | None = None) -> torch.Tensor:
    """``[B, U*L, h, D]`` (group sequence, this rank's heads) -> ``[B, L, H, D]``; inverse of
    :func:`gather_seq_scatter_heads` (``num_heads`` is the total H)."""
    q_ranges, _ = head_ranges(num_heads, num_heads, ctx.ulysses)
    if ctx.ulysses == 1:
        return x
    return out_back(x.transpose(1, 2), ctx.ulysses_group, ctx.ulysses_rank, q_ranges, stats)
