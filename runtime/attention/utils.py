"""Ring communication and the log-sum-exp merge of partial attention outputs."""

from __future__ import annotations

import warnings
from typing import Callable

import torch
import torch.distributed as dist
import torch.nn.functional as F

from sporch.runtime.attention.comm_stats import CommStats

__all__ = ["merge_block", "merge_", "resolve_merge", "RingComm"]

MERGE_MODES = ("auto", "eager", "fused")


def merge_(out: torch.Tensor, lse: torch.Tensor, block_out: torch.Tensor, block_lse: torch.Tensor) -> None:
    """Fold one block into the running ``(out, lse)`` in place, overflow-free::

        w    = sigmoid(lse_b - lse)            # the block's share of the new softmax mass
        out += w * (out_b - out)               # lerp: out stays the accumulator
        lse -= logsigmoid(lse - lse_b)         # log(exp(lse) + exp(lse_b))

    ``out``/``lse`` are the float32 (or float64) accumulators; the block may be in a
    half dtype. Eager torch needs one cast of the block when dtypes differ; the fused
    variant (:func:`resolve_merge`) reads it as it is."""
    d = block_lse.to(lse.dtype) - lse
    out.lerp_(block_out.to(out.dtype), torch.sigmoid(d).unsqueeze(-1))
    lse.sub_(F.logsigmoid(-d))


_fused_impl = None
_fused_broken: str | None = None


def _fused_merge_(out, lse, block_out, block_lse) -> None:
    """:func:`merge_` compiled into one pass over ``out`` (torch.compile, static shapes). Falls
    back to eager for the rest of the process, with one warning, if compiling fails (no
    Triton / C++ compiler); compile errors are raised before anything is written."""
    global _fused_impl, _fused_broken
    if _fused_broken is None:
        try:
            if _fused_impl is None:
                _fused_impl = torch.compile(merge_, dynamic=False, fullgraph=True)
            _fused_impl(out, lse, block_out, block_lse)
            return
        except torch._dynamo.exc.TorchDynamoException as exc:
            _fused_broken = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
            warnings.warn(f"fused LSE merge unavailable ({_fused_broken}); using the eager merge", stacklevel=2)
    merge_(out, lse, block_out, block_lse)


def resolve_merge(mode: str, device: torch.device | str) -> Callable[..., None]:
    """The in-place merge for ``mode``: ``"eager"`` (:func:`merge_`), ``"fused"``
    (torch.compile'd, eager fallback) or ``"auto"``: fused on CUDA (where the eager cast and
    temporaries cost a memory round trip per block), eager on CPU (compiling costs seconds
    there and the kernels dominate)."""
    if mode not in MERGE_MODES:
        raise ValueError(f"unknown merge mode {mode!r}; use one of {MERGE_MODES}")
    if mode == "auto":
        mode = "fused" if torch.device(device).type == "cuda" else "eager"
    return _fused_merge_ if mode == "fused" else merge_


def merge_block(out: torch.Tensor | None, lse: torch.Tensor | None, block_out: torch.Tensor,
                block_lse: torch.Tensor, merge: Callable[..., None] = merge_) -> tuple[torch.Tensor, torch.Tensor]:
    """Merge one block's ``(out [B, H, S, D], lse [B, H, S])`` into the running pair. The first
    block becomes the accumulator, in float32 (float64 stays float64); later blocks are folded
    into it in place by ``merge`` (see :func:`resolve_merge`), so no float32 copy is made per
    block. Pass kernel outputs (fresh tensors), not tensors the caller still needs."""
    if out is None:
        ct = torch.float64 if block_out.dtype == torch.float64 else torch.float32
        return block_out.to(ct), None if block_lse is None else block_lse.to(ct)  # None: a kernel without one
    merge(out, lse, block_out, block_lse)
    return out, lse


class RingComm:
    """P2P ring over one group: each step sends a buffer to the next rank and receives the
    previous rank's into another buffer, posted with ``batch_isend_irecv`` so the caller can
    compute while it travels. ``ranks`` are the group's global ranks in ring order."""

    def __init__(self, group, ranks: list[int], index: int, stats: CommStats | None = None,
                 name: str = "ring_kv") -> None:
        self.group = group
        self.size = len(ranks)
        self.index = index
        self.next = ranks[(index + 1) % self.size]
        self.prev = ranks[(index - 1) % self.size]
        self.stats = stats
        self.name = name
        self._reqs: list = []

    def send_recv(self, send: torch.Tensor, recv: torch.Tensor) -> None:
        if self.size == 1:
            raise RuntimeError("a ring of one rank sends nothing (gloo cannot send to itself)")
        if self._reqs:
            raise RuntimeError("previous ring transfer not waited for")
        ops = [dist.P2POp(dist.isend, send, self.next, self.group),
               dist.P2POp(dist.irecv, recv, self.prev, self.group)]
        self._reqs = dist.batch_isend_irecv(ops)
        if self.stats is not None:
            self.stats.add(self.name, send.numel() * send.element_size())

    def wait(self) -> None:
        for req in self._reqs:
            req.wait()
        self._reqs = []
