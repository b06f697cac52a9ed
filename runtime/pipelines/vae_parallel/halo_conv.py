"""The halo exchange: :class:`HaloConv` runs a convolution on a band of rows extended by the rows
its neighbour bands lend it (one all_gather of every rank's edge rows), and crops the rows
computed from the extension."""

from __future__ import annotations

import torch
import torch.distributed as dist
from torch import nn

from sporch.runtime.pipelines.vae_parallel.bands import _all_gather, _rank_and_size
from sporch.runtime.pipelines.vae_parallel.conv_geometry import halo_rows

__all__ = ["HaloConv"]


def _edges(x: torch.Tensor, p: int, group: dist.ProcessGroup | None,
           ) -> tuple[torch.Tensor | None, torch.Tensor | None]:
    """(the previous rank's last ``p`` rows, the next rank's first ``p`` rows) of ``x``;
    ``None`` on the first / last rank. One all_gather of [top p rows ; bottom p rows]."""
    rank, n = _rank_and_size(group)
    if x.shape[-2] < p:
        raise ValueError(f"a band of {x.shape[-2]} rows cannot lend the {p} halo rows a convolution needs: "
                         "decode on fewer ranks or a taller latent")
    mine = torch.cat([x[..., :p, :], x[..., -p:, :]], dim=-2)
    everyone = _all_gather(mine, group)
    above = everyone[rank - 1][..., p:, :] if rank > 0 else None
    below = everyone[rank + 1][..., :p, :] if rank < n - 1 else None
    return above, below


def _extend(x: torch.Tensor, above: torch.Tensor | None, below: torch.Tensor | None) -> torch.Tensor:
    parts = [t for t in (above, x, below) if t is not None]
    return torch.cat(parts, dim=-2) if len(parts) > 1 else x


class HaloConv(nn.Module):
    """A convolution on a band of rows that gives the band of the whole image's output.

    ``inner``: ``nn.Conv2d``, ``nn.Conv3d`` or a causal convolution that pads its input in its
    forward (:func:`padding_in_forward`; ``WanCausalConv3d``'s and ``QwenImageCausalConv3d``'s
    ``forward(x, cache_x=None)``: ``cache_x``, this band's earlier frames, is extended by the same
    halo, in the same exchange). The inner module runs unchanged, its own padding included (any
    mode: the padded rows only reach the output rows that are cropped); the ``p`` output rows
    from each side that was extended are cropped.
    """

    def __init__(self, inner: nn.Module, group: dist.ProcessGroup | None) -> None:
        super().__init__()
        p = halo_rows(inner)
        if p == 0:
            raise ValueError(f"{type(inner).__name__} has a one-row kernel: it needs no halo, leave it as it is")
        self.inner = inner
        self.group = group
        self.halo = p

    def forward(self, x: torch.Tensor, cache_x: torch.Tensor | None = None) -> torch.Tensor:
        p = self.halo
        cached = isinstance(cache_x, torch.Tensor)
        if cached:
            cache_x = cache_x.to(x.device)
            frames = cache_x.shape[2]
            above, below = _edges(torch.cat([cache_x, x], dim=2), p, self.group)
            cache_x = _extend(cache_x, *(None if t is None else t[:, :, :frames] for t in (above, below)))
            x = _extend(x, *(None if t is None else t[:, :, frames:] for t in (above, below)))
        else:
            above, below = _edges(x, p, self.group)
            x = _extend(x, above, below)
        out = self.inner(x, cache_x) if cache_x is not None else self.inner(x)
        top = p if above is not None else 0
        bottom = p if below is not None else 0
        if isinstance(out, tuple):  # (output, its frame cache): CogVideoXCausalConv3d's replicate mode
            return (out[0][..., top:out[0].shape[-2] - bottom, :], *out[1:])
        return out[..., top:out.shape[-2] - bottom, :]
