"""The entry points the pipelines call: :func:`decode_rows` (each rank decodes its band of the
latent with a :func:`~.surgery.parallelize_decoder` copy; the decoded bands gathered) and
:func:`row_parallel_vae` (a VAE copy whose decoder takes the whole latent and returns the whole
output on every rank, :class:`RowBands`, for a diffusers pipeline's own decode tail)."""

from __future__ import annotations

from typing import Callable

import torch
import torch.distributed as dist
from torch import nn

from sporch.runtime.parallel import head_offsets  # the start of each part, given the sizes

from sporch.runtime.pipelines.vae_parallel.bands import _rank_and_size, gather_rows, split_rows
from sporch.runtime.pipelines.vae_parallel.surgery import parallelize_decoder

__all__ = ["decode_rows", "RowBands", "row_parallel_vae"]


def decode_rows(pvae: nn.Module, latents: torch.Tensor, group: dist.ProcessGroup | None,
                decode: Callable[[nn.Module, torch.Tensor], torch.Tensor]) -> torch.Tensor:
    """Decode the whole ``latents`` ([B, C, F, H, W] or [B, C, H, W], the same on every rank
    of ``group``) with ``pvae`` (from :func:`parallelize_decoder`): this rank decodes its band
    of latent rows with ``decode(pvae, band)`` (the caller's own pre- and post-processing
    around ``pvae.decode``, per channel or per position), and the decoded bands are gathered
    to every rank of ``group`` (all_gather): every rank returns the whole decoded tensor.

    Every rank of ``group`` must call it, with latents of the same shape.
    """
    rank, n = _rank_and_size(group)
    counts = split_rows(latents.shape[-2], n)
    start = head_offsets(counts)[rank]
    band = latents[..., start:start + counts[rank], :]
    out = decode(pvae, band)
    scale, rest = divmod(out.shape[-2], counts[rank])
    if rest:
        raise ValueError(f"the decoded band has {out.shape[-2]} rows for {counts[rank]} latent rows: "
                         "not a whole spatial scale factor")
    return gather_rows(out, group, [c * scale for c in counts])


class RowBands(nn.Module):
    """A row-parallel decoder (from :func:`parallelize_decoder`) called with the whole input on
    every rank of ``group``: this rank's band of the input's rows (dim -2, :func:`split_rows`) goes
    in, and the whole output, gathered along dim -2, comes out on every rank. Further arguments
    go to ``inner`` as given (a frame cache of an earlier call is this rank's band already, as
    ``inner`` returned it). ``inner`` may return ``(output, cache)``: the output is gathered, the
    rest returned as it is."""

    def __init__(self, inner: nn.Module, group: dist.ProcessGroup | None) -> None:
        super().__init__()
        self.inner = inner
        self.group = group

    def forward(self, x: torch.Tensor, *args, **kwargs):
        rank, n = _rank_and_size(self.group)
        counts = split_rows(x.shape[-2], n)
        start = head_offsets(counts)[rank]
        out = self.inner(x[..., start:start + counts[rank], :], *args, **kwargs)
        first = out[0] if isinstance(out, tuple) else out
        scale, rest = divmod(first.shape[-2], counts[rank])
        if rest:
            raise ValueError(f"the decoded band has {first.shape[-2]} rows for {counts[rank]} latent rows: "
                             "not a whole spatial scale factor")
        whole = gather_rows(first, self.group, [c * scale for c in counts])
        return (whole, *out[1:]) if isinstance(out, tuple) else whole


def row_parallel_vae(vae: nn.Module, group: dist.ProcessGroup | None,
                     attention: tuple[type, ...] | None = None) -> nn.Module:
    """A copy of ``vae`` (sharing its weights) whose ``decode`` is called with the whole latent on
    every rank of ``group`` and returns the whole decoded tensor on every rank, each rank decoding
    only its band of rows: the copy's ``decoder`` is made row-parallel (:func:`parallelize_decoder`)
    and wrapped in :class:`RowBands`. Everything around the decoder runs as it is on the whole
    tensors, on every rank: the VAE's own ``decode`` (``post_quant_conv``, per position in the
    VAEs sporch decodes; frame batches and their caches; the final clamp) and whatever calls it,
    such as a diffusers pipeline's decode tail (latent un-normalisation and unpacking, the
    image/video processor), so a pipeline given this VAE decodes exactly as with the original.
    Every rank of ``group`` must make the same ``decode`` calls. ``ValueError`` (one line) where
    the decoder cannot be exact on row bands, as :func:`parallelize_decoder`."""
    pvae = parallelize_decoder(vae, group, attention, parts=("decoder",))
    pvae.decoder = RowBands(pvae.decoder, group)
    return pvae
