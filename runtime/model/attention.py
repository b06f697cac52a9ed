"""The attention seam: one call site for the model, two implementations.

* unsharded (``ctx is None``): ``sporch.runtime.attention.kernels.local_attention`` over the whole
  sequence, with the same kernel (``backend``) as the sharded path;
* sharded: ``sporch.runtime.attention.usp_attention`` on this rank's sequence shard.

Tensors are [B, S, H, D]. Key/value heads may be fewer than query heads (GQA): each kv head
serves ``H // H_kv`` consecutive query heads.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import torch
import torch.nn.functional as F

from sporch.runtime.attention import usp_attention
from sporch.runtime.attention.kernels import local_attention
from sporch.runtime.parallel import ParallelContext


def expand_kv(k: torch.Tensor, num_heads: int) -> torch.Tensor:
    """Repeat kv heads [B, S, Hkv, D] to [B, S, H, D] (consecutive query heads share a kv head)."""
    hkv = k.shape[2]
    if hkv == num_heads:
        return k
    return k.repeat_interleave(num_heads // hkv, dim=2)


def sdpa(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    """Full (non-causal) attention, [B, S, H, D] layout, GQA by expansion."""
    h = q.shape[2]
    k, v = expand_kv(k, h), expand_kv(v, h)
    out = F.scaled_dot_product_attention(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2))
    return out.transpose(1, 2)


@dataclass
class SequenceAttention:
    """How the model's sequence (self / joint) attention runs.

    ``ctx``: the ParallelContext, or None (unsharded). ``seq_len``: the
    unpadded global number of sharded tokens (keys past it are padding and masked).
    ``backend`` is passed through to usp_attention / local_attention. ``head_counts``: the
    query heads per Ulysses rank the Plan recorded (``plan.heads.q_heads_per_rank``), or None.
    """

    ctx: ParallelContext | None = None
    seq_len: int | None = None
    backend: str = "auto"
    head_counts: Sequence[int] | None = None
    #: Sequence attentions run so far in this forward: the block index (the watchdog's ``layer``).
    calls: int = 0

    @property
    def sharded(self) -> bool:
        """True when the sequence is split over more than one rank (a sequence group of one
        holds the whole sequence: plain local attention, no communication)."""
        return self.ctx is not None and self.ctx.sequence_size > 1

    def __call__(self, q, k, v, joint_q=None, joint_k=None, joint_v=None):
        """Self attention over the (sharded) sequence, optionally joined by replicated text
        tokens (``joint_*``, [B, T, H, D], whole on every rank). Returns ``out`` or
        ``(out, joint_out)`` when joint tokens are given."""
        layer, self.calls = self.calls, self.calls + 1
        if self.sharded:
            stats = getattr(self.ctx, "comm_stats", None)  # bytes sent, when someone counts
            if joint_q is None:
                return usp_attention(q, k, v, self.ctx, seq_len=self.seq_len, backend=self.backend, stats=stats,
                                     layer=layer, head_counts=self.head_counts)
            return usp_attention(
                q, k, v, self.ctx, seq_len=self.seq_len, backend=self.backend, stats=stats,
                joint_q=joint_q, joint_k=joint_k, joint_v=joint_v, layer=layer, head_counts=self.head_counts,
            )
        # unsharded: the same kernel (``backend``) as the sharded path
        if joint_q is None:
            return local_attention(q, k, v, backend=self.backend)
        s = q.shape[1]
        out = local_attention(torch.cat([q, joint_q], 1), torch.cat([k, joint_k], 1), torch.cat([v, joint_v], 1),
                              backend=self.backend)
        return out[:, :s], out[:, s:]
