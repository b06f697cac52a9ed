"""Ring attention over KV blocks (P2P), exact, with padding masked and optional causal.

Ring rank ``r`` holds queries (and one KV block) for the contiguous global positions
``[r * block_len, (r + 1) * block_len)``. At step ``s`` it computes its queries against the
KV block of ring rank ``(r - s) mod R`` while that block is already being forwarded to the
next rank (the transfer for step ``s+1`` is posted before step ``s`` computes). Blocks are
merged by log-sum-exp into one float32 accumulator, in place (``utils.merge_block``; fused by
torch.compile on CUDA). ``R - 1`` blocks are sent; a ring of one sends nothing.

Padding: keys at positions ``>= seq_len`` are sliced off each block; a block that is all
padding is skipped (it is still forwarded). Queries always see block 0's first key, so no
row is empty and no NaN appears. Causal: contiguous blocks, exact but not load-balanced
(later ring ranks do more work); blocks after the query block are skipped.
"""

from __future__ import annotations

import torch

from sporch.runtime.attention.comm_stats import CommStats
from sporch.runtime.attention.utils import RingComm, merge_block, resolve_merge

__all__ = ["ring_attention"]


def ring_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, *, kernel, scale: float,
                   group, ranks: list[int], index: int, block_len: int, seq_len: int, causal: bool = False,
                   kv_index: torch.Tensor | None = None, extra_kv: list[tuple[torch.Tensor, torch.Tensor]] = (),
                   stats: CommStats | None = None, compute_dtype: torch.dtype | None = None,
                   merge: str = "auto", key_index: list[torch.Tensor | None] | None = None,
                   ) -> tuple[torch.Tensor, torch.Tensor]:
    """q ``[B, Hq, Sq, D]`` (the first ``block_len`` rows are this ring rank's sequence block;
    any further rows are extra queries, e.g. text, that attend to every key), k/v
    ``[B, Hk, block_len, D]``; ``kv_index`` maps query heads to KV heads (None: identity).
    ``extra_kv``: blocks (e.g. text K/V, ``[B, Hk, T, D]``) every query attends to once.
    ``compute_dtype``: run the kernel in this dtype (blocks are cast just before the kernel,
    so the ring still sends the input dtype). ``merge``: ``"auto" | "eager" | "fused"``
    (``utils.resolve_merge``). ``key_index``: per source ring rank, the positions of its
    block's valid keys (None: all valid; empty: none), which replaces ``seq_len``'s tail rule
    where padding sits inside a block (chunks of uneven length). Returns float32 ``(out [B, Hq, Sq, Dv], lse [B, Hq, Sq])``."""
    R = len(ranks)
    if causal and q.shape[2] != block_len:
        raise ValueError("causal attention does not take extra (joint) queries")

    cast = compute_dtype is not None and compute_dtype != q.dtype
    if cast:
        q = q.to(compute_dtype)

    def expand(t: torch.Tensor) -> torch.Tensor:
        t = t if kv_index is None else t.index_select(1, kv_index)
        return t.to(compute_dtype) if cast else t

    merge_fn = resolve_merge(merge, q.device)
    out = lse = None
    if R == 1:
        kv_buf = None
    else:
        # one buffer per transfer: k and v packed; two buffers alternate (double buffering)
        if k.dtype == v.dtype and k.shape == v.shape:
            kv_buf = torch.stack([k, v])
        else:
            kv_buf = torch.cat([k.reshape(-1), v.to(k.dtype).reshape(-1)]) if k.dtype == v.dtype else None
            if kv_buf is None:
                raise ValueError("ring attention needs k and v of one dtype")
        spare = torch.empty_like(kv_buf)
        comm = RingComm(group, ranks, index, stats)

    def unpack(buf):
        if buf.dim() == k.dim() + 1:
            return buf[0], buf[1]
        nk = k.numel()
        return buf[:nk].view_as(k), buf[nk:].view(v.shape)

    for step in range(R):
        if R > 1:
            if step + 1 < R:
                comm.send_recv(kv_buf, spare)  # prefetch the next block before computing this one
            kb, vb = unpack(kv_buf)
        else:
            kb, vb = k, v
        src = (index - step) % R
        start = src * block_len
        valid = min(block_len, seq_len - start)
        picked = None if key_index is None else key_index[src]
        if picked is not None:
            valid = int(picked.numel())
        block_causal = False
        if causal:
            if src > index:
                valid = 0
            elif src == index:
                block_causal = True
                valid = block_len  # padded keys only reach padded queries under the causal mask
        if valid > 0:
            if picked is not None:
                kk, vv = kb.index_select(2, picked), vb.index_select(2, picked)
            else:
                kk, vv = (kb, vb) if valid == block_len else (kb[:, :, :valid], vb[:, :, :valid])
            bo, bl = kernel(q, expand(kk), expand(vv), scale, block_causal)
            out, lse = merge_block(out, lse, bo, bl, merge_fn)
        if R > 1 and step + 1 < R:
            comm.wait()
            kv_buf, spare = spare, kv_buf
    for tk, tv in extra_kv:
        bo, bl = kernel(q, expand(tk), expand(tv), scale, False)
        out, lse = merge_block(out, lse, bo, bl, merge_fn)
    assert out is not None
    return out, lse
