"""Ring communication and the log-sum-exp merge of partial attention outputs."""

from __future__ import annotations

import torch
import torch.distributed as dist
import torch.nn.functional as F

from runtime.attention.comm_stats import CommStats

__all__ = ["merge_block", "RingComm"]


def merge_block(out: torch.Tensor | None, lse: torch.Tensor | None, block_out: torch.Tensor,
                block_lse: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Merge one block's ``(out [B, H, S, D], lse [B, H, S])`` into the running pair, in float32
    (float64 stays float64), with the overflow-free form::

        out -= sigmoid(lse_b - lse) * (out - out_b)
        lse -= logsigmoid(lse - lse_b)

    The first block initialises the pair and is updated in place afterwards: pass kernel
    outputs (fresh tensors), not tensors the caller still needs.
    """
    ct = torch.float64 if block_out.dtype == torch.float64 else torch.float32
    if out is None:
        return block_out.to(ct), block_lse.to(ct)
    block_lse = block_lse.to(ct)
    w = torch.sigmoid(block_lse - lse).unsqueeze(-1)
    out.sub_(w * (out - block_out.to(ct)))
    lse.sub_(F.logsigmoid(lse - block_lse))
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
