"""The parallel dimensions and the arithmetic both sides of the Plan do with them (stdlib only).

Rank order and group membership are in docs/plan.md; the planner, the cost model and the runtime
split heads and pad the sequence with these functions, never with copies of their own.
"""

from __future__ import annotations

import enum
from typing import Optional


class Dim(str, enum.Enum):
    """The four parallel dimensions, outermost first (the rank order of docs/plan.md)."""

    DP = "dp"
    CFG = "cfg"
    RING = "ring"
    ULYSSES = "ulysses"


#: Dimension names, outermost first.
DIMS: tuple[str, ...] = tuple(d.value for d in Dim)
#: Group names: the four dimensions plus ``sequence`` (ring x ulysses).
GROUP_DIMS: tuple[str, ...] = DIMS + ("sequence",)

#: Most ranks one job may have: the Plan lists every rank, so a plan of more would be huge and slow
#: to make (a cluster descriptor may be bigger; a job then sets resources.nodes).
MAX_WORLD = 16384

def head_split(num_heads: int, parts: int) -> list[int]:
    """Query heads per Ulysses rank: the first ``num_heads % parts`` ranks get one extra."""
    if num_heads < 1 or parts < 1:
        raise ValueError(f"need num_heads >= 1 and parts >= 1, got {num_heads}, {parts}")
    base, extra = divmod(num_heads, parts)
    return [base + (1 if i < extra else 0) for i in range(parts)]


def kv_mode(num_heads: int, num_kv_heads: int, ulysses: int) -> Optional[str]:
    """"follow" (MHA), "split" (kv % U == 0), "replicate" (U % kv == 0), or None (refuse)."""
    if num_kv_heads == num_heads:
        return "follow"
    if num_kv_heads % ulysses == 0:
        return "split"
    if ulysses % num_kv_heads == 0:
        return "replicate"
    return None


def runs_cfg(guidance_scale: float, distilled: bool) -> bool:
    """Whether classifier-free guidance runs (two branches per step, what the ``cfg`` dimension
    splits): ``guidance_scale > 1`` on a model with a CFG branch; never on a guidance-distilled one.
    The planner records it as ``plan.workload.cfg_enabled``; the runtime reads that record."""
    return not distilled and guidance_scale > 1


def padded_length(seq_len: int, degree: int) -> int:
    """``seq_len`` rounded up to a multiple of the sequence degree (ring x ulysses)."""
    return -(-seq_len // degree) * degree


def sequence_chunks(seq_len: int, degree: int) -> list[int]:
    """Tokens per sequence rank where the sequence is cut unpadded (``SequenceSection.split``
    ``"uneven"``, the one model path): the first ``seq_len % degree`` ranks get one more, as
    ``torch.tensor_split`` cuts (runtime/models/sequence_split.py cuts with this)."""
    if seq_len < 0 or degree < 1:
        raise ValueError(f"need seq_len >= 0 and degree >= 1, got {seq_len}, {degree}")
    base, extra = divmod(seq_len, degree)
    return [base + (1 if i < extra else 0) for i in range(degree)]
