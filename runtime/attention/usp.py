"""USP attention: Ulysses all-to-all in -> ring attention -> Ulysses all-to-all out.

See :func:`usp_attention`. Layout of the sequence (the Plan's): the sequence group has
``R * U`` ranks; rank ``(ring_i, ulysses_i)`` holds chunk ``ring_i * U + ulysses_i``. After
the Ulysses exchange the ranks of one Ulysses group hold the contiguous range of ``U``
chunks ``[ring_i * U * L, (ring_i + 1) * U * L)`` for their heads, which is exactly the ring's
KV block.
"""

from __future__ import annotations

import math
from contextlib import nullcontext
from typing import Sequence

import torch

from sporch.runtime.attention.comm_stats import CommStats
from sporch.runtime.attention.kernels import NO_LSE, resolve_backend
from sporch.runtime.attention.ring import ring_attention
from sporch.runtime.attention.ulysses import exchange_heads, head_ranges, out_back, qkv_in
from sporch.runtime.parallel import ParallelContext

__all__ = ["usp_attention"]


def _check(q, k, v, joint_q, joint_k, joint_v, ctx: ParallelContext, seq_len):
    if q.dim() != 4 or k.dim() != 4 or v.dim() != 4:
        raise ValueError(f"q, k, v must be [B, S_local, H, D]; got {tuple(q.shape)}, {tuple(k.shape)}, {tuple(v.shape)}")
    B, L, H, D = q.shape
    if k.shape[:2] != (B, L) or v.shape[:3] != k.shape[:3] or k.shape[3] != D:
        raise ValueError(f"k, v must be [B={B}, S_local={L}, H_kv, D={D}]; got {tuple(k.shape)}, {tuple(v.shape)}")
    if H % k.shape[2]:
        raise ValueError(f"query heads {H} must be a multiple of KV heads {k.shape[2]} (GQA)")
    if H < ctx.ulysses:
        raise ValueError(f"{H} heads cannot be split over ulysses={ctx.ulysses} ranks")
    if not (q.dtype == k.dtype == v.dtype):
        raise ValueError(f"q, k, v dtypes differ: {q.dtype}, {k.dtype}, {v.dtype}")
    full = L * ctx.sequence_size
    if not 1 <= seq_len <= full:
        raise ValueError(f"seq_len {seq_len} outside [1, {full}] (S_local {L} x {ctx.sequence_size} sequence ranks)")
    if (joint_k is None) != (joint_v is None):
        raise ValueError("joint_k and joint_v go together")
    if joint_k is not None:
        if joint_k.dim() != 4 or joint_k.shape[0] != B or joint_k.shape[2] != k.shape[2] or joint_k.shape[3] != D:
            raise ValueError(f"joint_k must be [B={B}, T, H_kv={k.shape[2]}, D={D}]; got {tuple(joint_k.shape)}")
        if joint_v.shape[:3] != joint_k.shape[:3] or joint_v.shape[3] != v.shape[3]:
            raise ValueError(f"joint_v must be [B, T, H_kv, Dv] like joint_k; got {tuple(joint_v.shape)}")
    if joint_q is not None:
        if joint_q.dim() != 4 or joint_q.shape[0] != B or joint_q.shape[2:] != (H, D):
            raise ValueError(f"joint_q must be [B={B}, T, H={H}, D={D}]; got {tuple(joint_q.shape)}")
        if joint_k is not None and joint_q.shape[1] != joint_k.shape[1]:
            raise ValueError("joint_q and joint_k must have the same number of text tokens")


def usp_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, ctx: ParallelContext, *, seq_len: int | None = None,
                  causal: bool = False, joint_q: torch.Tensor | None = None, joint_k: torch.Tensor | None = None,
                  joint_v: torch.Tensor | None = None, backend: str = "auto", scale: float | None = None,
                  stats: CommStats | None = None, merge: str = "auto", layer: int | None = None,
                  key_lens: Sequence[int] | None = None, key_mask: torch.Tensor | None = None,
                  head_counts: Sequence[int] | None = None):
    """Exact attention over the sequence sharded across ``ctx``'s sequence group.

    ``q [B, S_local, H, D]``, ``k, v [B, S_local, H_kv, D]`` are this rank's sequence chunk
    (``ctx.shard_sequence``); ``H_kv`` may be smaller (GQA, ``H % H_kv == 0``). Returns this
    rank's output chunk ``[B, S_local, H, D]`` in q's dtype.

    ``seq_len``: the unpadded global length (default: no padding); keys past it are masked.
    ``joint_k/joint_v [B, T, H_kv, D]``: text tokens, replicated on every rank; every query
    attends to them once. ``joint_q [B, T, H, D]``: text queries, which attend to all image and
    text keys; when given, returns ``(out, joint_out [B, T, H, D])`` (joint_out identical on
    every rank of the sequence group). ``causal``: top-left causal over the global sequence
    (not with joint tokens). ``backend``: a name from ``sporch.runtime.attention.available_backends``
    or ``"auto"``. ``scale``: softmax scale, default ``1/sqrt(D)``. ``stats``: a
    :class:`CommStats` that receives the bytes this rank sends per collective. ``merge``: how
    ring blocks are merged, ``"auto" | "eager" | "fused"`` (``attention.utils.resolve_merge``).

    ``key_lens``: valid keys at the head of each sequence rank's chunk (chunk index = sequence
    rank), the rest of each chunk being padding: for sequences split unevenly, where padding sits
    inside the global sequence rather than at its tail (replaces ``seq_len``; not with ``causal``).
    ``key_mask``: bool ``[sequence ranks, S_local]``, True for the keys of each rank's chunk that
    every query attends to (padding and keys an attention mask drops are False): the general form
    of ``key_lens`` (which is ``key_mask[r, :key_lens[r]]``), for masks that drop keys anywhere;
    the same for every row of the batch (callers with per-row masks call once per row).

    ``head_counts``: the query heads each Ulysses rank owns as the Plan recorded them
    (``plan.heads.q_heads_per_rank``); refused in one line when they do not add up to ``H`` over
    ``ulysses`` ranks. None: split by ``contract.parallel.head_split`` (callers without a Plan).

    ``layer``: the model's block calling (for the collective watchdog's record, ``ctx.collective``).

    Collective over the sequence group: every rank of it must call with matching shapes.
    Any exception marks ``ctx`` broken (see ``ParallelContext.guard``).
    """
    with ctx.guard():
        B, L, H, D = q.shape if q.dim() == 4 else (0, 0, 0, 0)
        if seq_len is None:
            seq_len = L * ctx.sequence_size
        _check(q, k, v, joint_q, joint_k, joint_v, ctx, seq_len)
        if key_lens is not None and (causal or len(key_lens) != ctx.sequence_size
                                     or not all(0 <= n <= L for n in key_lens) or not sum(key_lens)):
            raise ValueError(f"key_lens {list(key_lens)} must give 0..{L} valid keys for each of the "
                             f"{ctx.sequence_size} sequence ranks, some keys in all, and no causal mask")
        if key_mask is not None and (causal or key_lens is not None
                                     or tuple(key_mask.shape) != (ctx.sequence_size, L) or not bool(key_mask.any())):
            raise ValueError(f"key_mask of shape {tuple(key_mask.shape)} must be bool [{ctx.sequence_size}, {L}] "
                             "(sequence ranks x local keys) keeping some key, without key_lens or a causal mask")
        if key_lens is not None:
            key_mask = torch.arange(L).unsqueeze(0) < torch.tensor([int(n) for n in key_lens]).unsqueeze(1)
        if causal and (joint_q is not None or joint_k is not None):
            raise ValueError("causal attention with joint tokens is not supported")
        Hkv = k.shape[2]
        U, me = ctx.ulysses, ctx.ulysses_rank
        if scale is None:
            scale = 1.0 / math.sqrt(D)
        _, kernel = resolve_backend(backend, q.device, q.dtype)

        q_ranges, kv_ranges = head_ranges(H, Hkv, U, head_counts)
        qs, qe = q_ranges[me]
        ks, ke = kv_ranges[me]
        g = H // Hkv
        idx = [h // g - ks for h in range(qs, qe)]
        kv_index = None if idx == list(range(ke - ks)) else torch.tensor(idx, device=q.device, dtype=torch.long)

        # 1. Ulysses in: [B, L, H, D] x3 -> [B, h, U*L, D]
        with _watch(ctx, "ulysses_qkv", "ulysses", "all_to_all", layer):
            qi, ki, vi = qkv_in(q, k, v, ctx.ulysses_group, me, q_ranges, kv_ranges, stats)
        block_len = U * L

        # 2. joint tokens: this rank's head slices
        extra = []
        if joint_k is not None:
            extra.append((joint_k[:, :, ks:ke].transpose(1, 2).contiguous(),
                          joint_v[:, :, ks:ke].transpose(1, 2).contiguous()))
        if joint_q is not None:
            qi = torch.cat([qi, joint_q[:, :, qs:qe].transpose(1, 2).to(qi.dtype)], dim=2)

        # 3. ring over KV blocks. Where the kernel can only return a half-precision block output
        #    and more than one block is merged, run it in float32 on CPU (same speed there), so
        #    the result is rounded once, like single-process SDPA; comm stays in the input dtype.
        n_blocks = ctx.ring + len(extra)
        name = resolve_backend(backend, q.device, q.dtype)[0]
        if name in NO_LSE and n_blocks > 1:
            raise ValueError(f"attention backend {name} returns no log-sum-exp, so it cannot merge the {n_blocks} "
                             "blocks of a ring or of joint text keys: use parallel.ring=1 without joint attention, "
                             "or workload.attention_precision=exact")
        compute_dtype = None
        if q.dtype in (torch.float16, torch.bfloat16) and q.device.type == "cpu" and n_blocks > 1:
            compute_dtype = torch.float32
            _, kernel = resolve_backend(backend, q.device, torch.float32)
        with _watch(ctx, "ring_kv", "ring", "p2p", layer):
            out, _ = ring_attention(qi, ki, vi, kernel=kernel, scale=scale, group=ctx.ring_group,
                                    ranks=ctx.group_ranks("ring"), index=ctx.ring_rank, block_len=block_len,
                                    seq_len=seq_len, causal=causal, kv_index=kv_index, extra_kv=extra, stats=stats,
                                    compute_dtype=compute_dtype, merge=merge,
                                    key_index=_key_index(key_mask, ctx, L, q.device))

        # 4. Ulysses out (cast to the input dtype on the way)
        with _watch(ctx, "ulysses_out", "ulysses", "all_to_all", layer):
            local = out_back(out[:, :, :block_len], ctx.ulysses_group, me, q_ranges, stats, dtype=q.dtype)
        if joint_q is None:
            return local
        with _watch(ctx, "ulysses_joint_out", "ulysses", "all_to_all", layer):
            text = exchange_heads(out[:, :, block_len:].to(q.dtype), ctx.ulysses_group, me, q_ranges, stats)
        return local, text


_NO_WATCH = nullcontext()


def _key_index(key_mask: torch.Tensor | None, ctx: ParallelContext, chunk: int, device) -> list | None:
    """Per ring rank, the positions of the valid keys in its Ulysses-gathered block (the
    group's ``U`` chunks of ``chunk`` tokens, chunk ``ring_i * U + u``); None where all are."""
    if key_mask is None:
        return None
    U, out = ctx.ulysses, []
    for src in range(ctx.ring):
        block = key_mask[src * U:(src + 1) * U].reshape(-1).to(torch.bool)
        out.append(None if bool(block.all()) else block.nonzero().flatten().to(device=device, dtype=torch.long))
    return out


def _watch(ctx: ParallelContext, name: str, dim: str, kind: str, layer: int | None):
    """``ctx.collective`` where the ``dim`` group communicates (a group of one sends nothing)."""
    if getattr(ctx, "watchdog", None) is None or ctx.size(dim) == 1:
        return _NO_WATCH
    return ctx.collective(name, dim, kind=kind, layer=layer)
