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

import torch
import torch.distributed as dist

from runtime.attention.comm_stats import CommStats
from runtime.parallel import head_offsets, split_heads

__all__ = ["head_ranges", "qkv_in", "out_back", "exchange_heads", "gather_seq_scatter_heads",
           "gather_heads_scatter_seq"]


def head_ranges(num_heads: int, num_kv_heads: int, parts: int) -> tuple[list[tuple[int, int]], list[tuple[int, int]]]:
    """``(q_ranges, kv_ranges)``: the query heads and the KV heads each of ``parts`` ranks owns."""
    if num_heads % num_kv_heads:
        raise ValueError(f"num_heads {num_heads} is not a multiple of num_kv_heads {num_kv_heads}")
    counts = split_heads(num_heads, parts)
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
    dist.all_to_all_single(recv, send, out_splits, in_splits, group=group)
    if stats is not None:
        row = _nbytes(send) // max(1, send.shape[0])
        stats.add(name, (sum(in_splits) - in_splits[me]) * row)


def qkv_in(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, group, me: int, q_ranges, kv_ranges,
           stats: CommStats | None = None) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """q ``[B, L, H, D]``, k/v ``[B, L, Hkv, D]`` (this rank's sequence chunk, all heads) ->
    ``[B, h, U*L, D]`` each (the Ulysses group's whole sequence, this rank's heads).
    One all-to-all when q, k, v share dtype and trailing shape; three otherwise."""
    U = len(q_ranges)
    B, L = q.shape[0], q.shape[1]
    hq = q_ranges[me][1] - q_ranges[me][0]
    hk = kv_ranges[me][1] - kv_ranges[me][0]
    if U == 1:
        return (q.transpose(1, 2).contiguous(), k.transpose(1, 2).contiguous(), v.transpose(1, 2).contiguous())
    qt, kt, vt = q.permute(2, 0, 1, 3), k.permute(2, 0, 1, 3), v.permute(2, 0, 1, 3)  # [H, B, L, D]

    def unpack(recv: torch.Tensor, rows: int, lo: int, n: int) -> torch.Tensor:
        r = recv.view(U, rows, B, L, recv.shape[-1])[:, lo:lo + n]  # [U, n, B, L, D]
        return r.permute(2, 1, 0, 3, 4).reshape(B, n, U * L, recv.shape[-1])

    packable = q.dtype == k.dtype == v.dtype and q.shape[-1] == k.shape[-1] == v.shape[-1]
    if packable:
        pieces, in_splits = [], []
        for (s, e), (ks, ke) in zip(q_ranges, kv_ranges):
            pieces += [qt[s:e], kt[ks:ke], vt[ks:ke]]
            in_splits.append((e - s) + 2 * (ke - ks))
        send = torch.cat(pieces, 0)
        rows = hq + 2 * hk
        recv = send.new_empty((U * rows,) + tuple(send.shape[1:]))
        _a2a(recv, send, [rows] * U, in_splits, group, me, stats, "ulysses_qkv")
        return unpack(recv, rows, 0, hq), unpack(recv, rows, hq, hk), unpack(recv, rows, hq + hk, hk)
    outs = []
    for t, ranges, n in ((qt, q_ranges, hq), (kt, kv_ranges, hk), (vt, kv_ranges, hk)):
        send = torch.cat([t[s:e] for s, e in ranges], 0)
        recv = send.new_empty((U * n,) + tuple(send.shape[1:]))
        _a2a(recv, send, [n] * U, [e - s for s, e in ranges], group, me, stats, "ulysses_qkv")
        outs.append(unpack(recv, n, 0, n))
    return outs[0], outs[1], outs[2]


def out_back(o: torch.Tensor, group, me: int, q_ranges, stats: CommStats | None = None) -> torch.Tensor:
    """``[B, h, U*L, D]`` (this rank's heads, the group's sequence) -> ``[B, L, H, D]``
    (this rank's sequence chunk, all heads)."""
    U = len(q_ranges)
    B, h, S, D = o.shape
    if U == 1:
        return o.transpose(1, 2).contiguous()
    L = S // U
    send = o.reshape(B, h, U, L, D).permute(2, 1, 0, 3, 4).contiguous()  # [U, h, B, L, D]
    send = send.view(U * h, B, L, D)
    H = q_ranges[-1][1]
    recv = o.new_empty((H, B, L, D))
    _a2a(recv, send, [e - s for s, e in q_ranges], [h] * U, group, me, stats, "ulysses_out")
    return recv.permute(1, 2, 0, 3).contiguous()


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

def gather_seq_scatter_heads(x: torch.Tensor, ctx, *, stats: CommStats | None = None) -> torch.Tensor:
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


def gather_heads_scatter_seq(x: torch.Tensor, ctx, num_heads: int, *, stats: CommStats | None = None) -> torch.Tensor:
    """``[B, U*L, h, D]`` (group sequence, this rank's heads) -> ``[B, L, H, D]``; inverse of
    :func:`gather_seq_scatter_heads` (``num_heads`` is the total H)."""
    q_ranges, _ = head_ranges(num_heads, num_heads, ctx.ulysses)
    if ctx.ulysses == 1:
        return x
    return out_back(x.transpose(1, 2), ctx.ulysses_group, ctx.ulysses_rank, q_ranges, stats)
