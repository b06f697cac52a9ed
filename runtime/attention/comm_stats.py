"""Bytes each rank sends, per collective, and the layout's theoretical minimum.

What is counted is the *payload* this rank addresses to other ranks (bytes of the tensor
pieces whose destination is another rank), not the backend's wire traffic: an all-to-all
counts every chunk except the one a rank keeps for itself, a P2P send counts its tensor.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from sporch.orchestrator.contract.parallel import head_split

__all__ = ["CommStats", "usp_min_bytes"]


@dataclass
class CommStats:
    """Accumulates ``sent[name]`` (bytes) and ``calls[name]`` (operations) per collective.

    Names used by :func:`sporch.runtime.attention.usp_attention`:
    ``ulysses_qkv`` (all-to-all of q, k, v in), ``ring_kv`` (P2P of KV blocks),
    ``ulysses_out`` (all-to-all of the output back), ``ulysses_joint_out`` (exchange of
    the text-token output head slices, only with ``joint_q``).
    """

    sent: dict[str, int] = field(default_factory=dict)
    calls: dict[str, int] = field(default_factory=dict)

    def add(self, name: str, nbytes: int) -> None:
        self.sent[name] = self.sent.get(name, 0) + int(nbytes)
        self.calls[name] = self.calls.get(name, 0) + 1

    @property
    def total(self) -> int:
        return sum(self.sent.values())

    def reset(self) -> None:
        self.sent.clear()
        self.calls.clear()

    def as_dict(self) -> dict[str, int]:
        return dict(self.sent)


def usp_min_bytes(*, batch: int, local_len: int, num_heads: int, num_kv_heads: int, head_dim: int,
                  ulysses: int, ring: int, ulysses_rank: int, itemsize: int, joint_len: int = 0,
                  joint_q: bool = False, v_head_dim: int | None = None) -> dict[str, int]:
    """Minimum bytes ``ulysses_rank`` must send in one USP attention call, per collective.

    * Ulysses in: every q head, and every KV head a destination's query heads need, of this
      rank's sequence chunk must reach the rank that owns that head - all except the heads
      this rank keeps. For MHA with even heads that is ``(U-1)/U`` of q, k and v.
    * Ring: the KV block (this rank's KV heads over the ring rank's ``U*local_len`` tokens)
      must visit the ``R-1`` other ring ranks: ``R-1`` blocks.
    * Ulysses out: ``(U-1)/U`` of the local output (the chunks of the other ranks' tokens).
    * Joint out: this rank's text-output heads to the ``U-1`` other Ulysses ranks.
    """
    U, R, L, B = ulysses, ring, local_len, batch
    Dv = head_dim if v_head_dim is None else v_head_dim
    q_counts = head_split(num_heads, U)
    group = num_heads // num_kv_heads
    starts = [sum(q_counts[:j]) for j in range(U)]
    kv_counts = []
    for s, c in zip(starts, q_counts):
        kv_counts.append((s + c - 1) // group - s // group + 1)
    me = ulysses_rank
    out: dict[str, int] = {}
    if U > 1:
        q_rows = sum(q_counts) - q_counts[me]
        kv_rows = sum(kv_counts) - kv_counts[me]
        out["ulysses_qkv"] = B * L * (q_rows * head_dim + kv_rows * (head_dim + Dv)) * itemsize
        out["ulysses_out"] = (U - 1) * B * L * q_counts[me] * Dv * itemsize
        if joint_q:
            out["ulysses_joint_out"] = (U - 1) * B * joint_len * q_counts[me] * Dv * itemsize
    if R > 1:
        out["ring_kv"] = (R - 1) * B * (U * L) * kv_counts[me] * (head_dim + Dv) * itemsize
    return out
