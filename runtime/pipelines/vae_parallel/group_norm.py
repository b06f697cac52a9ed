"""Group norm on row bands: :class:`DistGroupNorm`, ``nn.GroupNorm`` with the whole image's
statistics (sums and counts all-reduced over the group)."""

from __future__ import annotations

import torch
import torch.distributed as dist
from torch import nn

__all__ = ["DistGroupNorm"]


class DistGroupNorm(nn.Module):
    """``nn.GroupNorm`` whose statistics are those of the whole image, from bands of rows.

    Two passes (the mean, then the mean squared deviation), each a local float64 sum per
    (sample, group) all-reduced over ``group`` with the element counts, so it matches
    ``nn.GroupNorm`` on the whole tensor to float rounding. The normalisation and the affine
    are computed in float32 or wider and cast back to the input's dtype.
    """

    def __init__(self, inner: nn.GroupNorm, group: dist.ProcessGroup | None) -> None:
        super().__init__()
        self.inner = inner
        self.group = group

    def _sum(self, values: torch.Tensor) -> torch.Tensor:
        """[N, G] float64 sums over this rank's elements, all-reduced."""
        total = values.sum(dim=-1, dtype=torch.float64)
        dist.all_reduce(total, group=self.group)
        return total

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        g = self.inner
        n, c = x.shape[:2]
        work = x.float() if x.dtype in (torch.float16, torch.bfloat16) else x
        grouped = work.reshape(n, g.num_groups, -1)
        count = torch.tensor([float(grouped.shape[-1])], dtype=torch.float64, device=x.device)
        dist.all_reduce(count, group=self.group)
        mean = self._sum(grouped) / count
        centred = grouped - mean.to(work.dtype)[..., None]
        var = self._sum(centred * centred) / count
        rstd = torch.rsqrt(var + g.eps).to(work.dtype)[..., None]
        out = (centred * rstd).reshape(work.shape)
        if g.affine:
            shape = (1, c) + (1,) * (x.dim() - 2)
            out = out * g.weight.view(shape).to(work.dtype) + g.bias.view(shape).to(work.dtype)
        return out.to(x.dtype)
