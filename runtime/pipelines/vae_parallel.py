"""Exact spatially-parallel VAE decode: the latent split by rows over a process group.

``pipeline.vae: parallel`` (like xDiT's DistVAE / patch-parallel VAE). Every rank of the
group holds only its own band of rows (the height axis, dim -2) of every activation of the
decoder, and the gathered frames equal one process's ``vae.decode`` of the whole latent up to
float rounding::

    pvae = parallelize_decoder(vae, group)          # once; the original vae is left as it is
    video = decode_rows(pvae, latents, group, lambda v, z: v.decode(z, return_dict=False)[0])

Method: module surgery on a copy of the VAE (no function or class is patched). In the copy's
``decoder`` and ``post_quant_conv``:

* a convolution whose kernel is taller than one row (stride 1, dilation 1, "same" height
  padding) becomes :class:`HaloConv`: before the convolution the band is extended by the
  ``p = (k - 1) // 2`` rows it needs from each neighbour band (the previous rank's last p
  rows on top, the next rank's first p rows below), the convolution runs unchanged, and the p
  output rows computed from each extension are cropped. The first and last rank extend nothing
  on their outer side, where the convolution's own padding applies as it does for the whole
  image. Every output row therefore sees exactly the input rows it sees in the whole image.
  ``WanCausalConv3d``'s cache of earlier frames (``cache_x``) is a band of the same rows and
  is extended with it, in the same exchange. A causal convolution that pads its own input in
  its forward before a padding-0 convolution (:func:`padding_in_forward`: Wan's and Qwen-Image's
  ``_padding``, HunyuanVideo's ``time_causal_padding`` with replicate padding) is wrapped whole,
  so its padding, of any mode, reaches only the image's edges and the cropped rows.
* ``nn.GroupNorm`` becomes :class:`DistGroupNorm`: the mean and variance of each group are
  taken over the whole image (sums and counts all-reduced over the group, two passes,
  float64 accumulation), then the same affine.
* an attention block (diffusers ``Attention`` in ``AutoencoderKL``'s mid block,
  ``WanAttentionBlock`` in the Wan2.1 decoder, ``QwenImageAttentionBlock``, and
  HunyuanVideo's whole mid block, whose attention mixes frames, rows and columns under one
  frame-causal mask) becomes :class:`GatherRows`: the whole tensor is
  gathered, the block runs on it unchanged, and each rank keeps its own rows. Everything inside
  the block sees the whole tensor and is left alone.
* what is per position (Wan's RMS norm over channels, activations, 1x1 and 1-row-high
  convolutions such as Wan's temporal ``time_conv``, the nearest upsampling by 2 of both
  decoders) needs nothing: a band of its input gives exactly the band of its output.

A module the method cannot make exact (a strided, dilated or transposed convolution, a
non-"same" height padding, pooling, batch/instance norm, diffusers' ``SpatialNorm``, an
upsampling by a fractional factor or to a fixed size, an unknown attention block, a block that
injects noise drawn for its rows: LTX-Video 0.9.1's ``decoder_inject_noise``) makes
:func:`parallelize_decoder` raise ``ValueError`` naming it, rather than decode wrongly.

:func:`row_parallel_vae` hands a caller that decodes the whole latent itself (a diffusers
pipeline's decode tail: the generic generate) a copy whose decoder takes this rank's band of
rows and returns the whole output (:class:`RowBands`); everything around the decoder runs
unchanged on every rank. Measured on every generic family's tiny VAE (SD3.5, CogVideoX,
LTX-Video, Qwen-Image, HunyuanVideo; tests/runtime/pipelines/test_vae_parallel_families.py):
within 7e-6 of the single decode, 2 and 4 ranks, uneven bands.

Exactness: each rank computes the same sums as the single process for its rows (the same
inputs, the same weights, the same kernels); only float rounding differs, where a library picks
a different summation order for a differently shaped tensor (a convolution over fewer rows,
group-norm statistics summed in pieces). Measured in float32 on tiny random Wan2.1 and Flux.1
VAEs (tests/runtime/pipelines/test_vae_parallel.py): single convolutions on bands 0, GroupNorm
no further from a float64 GroupNorm than torch's own, whole decodes within 5e-6 of the single
decode on outputs of order 1. That is the single float32 decode's own distance from a float64
decode (3e-6 to 9e-6), and the parallel decode is as close to the float64 decode as the
single float32 decode is.

Wan2.1 (``AutoencoderKLWan``): ``decode`` runs ``post_quant_conv`` and then the decoder frame
by frame with its feature cache (``clear_cache`` / ``_feat_map``); every cached tensor is a
band of this rank's rows, so the cache needs nothing but the halo of ``cache_x``. The
temporal upsampling (``WanResample`` "upsample3d": the "Rep" marker on the first frame, the
(3, 1, 1) ``time_conv``) is per position. The final ``clamp`` is per position. Tiling must be
off (it would cut the band again, with blending): the copy has ``use_tiling = False``;
``use_slicing`` (one sample at a time) is exact and kept.

Communication per decode (``n`` ranks, every collective within ``group``; the ranks run the
same layers in the same order, so the collectives pair up):

* one ``all_gather`` per halo convolution call of a ``[..., 2p, W]`` edge tensor (this
  rank's top and bottom p rows; ``cache_x`` rides along) -- every rank receives all ``n``
  edges and keeps its two neighbours': ``n * 2p`` rows received, cheap for the group sizes
  a VAE is split over (point-to-point would receive ``2p``);
* two ``all_reduce`` of ``[batch, groups]`` float64 sums per GroupNorm, plus the counts;
* one gather of the whole tensor per attention block, at latent resolution (both decoders
  attend only in the mid block), plus one of the row counts;
* the final gather of the decoded bands to every rank (:func:`decode_rows`).

Memory per rank: about ``1/n`` of the decoder's activations plus ``2p`` halo rows per
convolution, the whole latent-resolution tensor inside an attention block, and the whole
decoded output at the end (every rank receives it). The copy shares the original's parameters
and buffers (no second set of weights); only the module tree is new.
"""

from __future__ import annotations

import copy
from typing import Callable

import torch
import torch.distributed as dist
from torch import nn

from sporch.runtime.parallel import head_offsets  # the start of each part, given the sizes

__all__ = ["split_rows", "HaloConv", "DistGroupNorm", "GatherRows", "parallelize_decoder", "decode_rows",
           "attention_types", "gather_rows", "halo_rows", "padding_in_forward", "RowBands", "row_parallel_vae"]

#: Modules that mix rows in a way a band cannot reproduce; refused anywhere in the decoder
#: outside an attention block.
_REFUSED = (nn.ConvTranspose1d, nn.ConvTranspose2d, nn.ConvTranspose3d, nn.MaxPool2d, nn.MaxPool3d, nn.AvgPool2d,
            nn.AvgPool3d, nn.AdaptiveAvgPool2d, nn.AdaptiveAvgPool3d, nn.AdaptiveMaxPool2d, nn.AdaptiveMaxPool3d,
            nn.BatchNorm2d, nn.BatchNorm3d, nn.InstanceNorm2d, nn.InstanceNorm3d, nn.PixelShuffle,
            nn.PixelUnshuffle, nn.Conv1d)


# --------------------------------------------------------------------------------------
# rows
# --------------------------------------------------------------------------------------

def split_rows(n_rows: int, n_ranks: int) -> list[int]:
    """Rows per rank, as even as possible, the first ranks taking the remainder:
    ``split_rows(10, 4) == [3, 3, 2, 2]``."""
    if n_ranks < 1:
        raise ValueError(f"cannot split rows over {n_ranks} ranks")
    if n_rows < n_ranks:
        raise ValueError(f"the latent has {n_rows} rows, fewer than the {n_ranks} ranks decoding it, so a rank "
                         f"would get none: decode on at most {n_rows} ranks or a larger latent")
    base, extra = divmod(n_rows, n_ranks)
    return [base + (1 if r < extra else 0) for r in range(n_ranks)]


def _rank_and_size(group: dist.ProcessGroup | None) -> tuple[int, int]:
    return dist.get_rank(group), dist.get_world_size(group)


def _all_gather(x: torch.Tensor, group: dist.ProcessGroup | None) -> list[torch.Tensor]:
    """``dist.all_gather`` of a tensor of the same shape on every rank."""
    x = x.contiguous()
    out = [torch.empty_like(x) for _ in range(dist.get_world_size(group))]
    dist.all_gather(out, x, group=group)
    return out


def gather_rows(x: torch.Tensor, group: dist.ProcessGroup | None, counts: list[int] | None = None) -> torch.Tensor:
    """The whole tensor along dim -2 from every rank's band (bands in rank order), on every
    rank. ``counts``: the rows of every rank, when known; otherwise they are gathered first.
    Bands of different heights are padded to the tallest for the gather and trimmed."""
    if counts is None:
        mine = torch.tensor([x.shape[-2]], dtype=torch.int64, device=x.device)
        counts = [int(c.item()) for c in _all_gather(mine, group)]
    tallest = max(counts)
    padded = x
    if x.shape[-2] < tallest:
        pad = x.new_zeros(*x.shape[:-2], tallest - x.shape[-2], x.shape[-1])
        padded = torch.cat([x, pad], dim=-2)
    bands = _all_gather(padded, group)
    return torch.cat([b[..., :c, :] for b, c in zip(bands, counts)], dim=-2)


# --------------------------------------------------------------------------------------
# convolutions
# --------------------------------------------------------------------------------------

def _is_conv(module: object) -> bool:
    return isinstance(module, (nn.Conv2d, nn.Conv3d))


def _height_axis(conv: nn.Module) -> int:
    """Index of the height axis in a conv's kernel_size/stride/... tuples."""
    return 0 if isinstance(conv, nn.Conv2d) else 1


def padding_in_forward(module: nn.Module) -> tuple[int, int] | None:
    """(rows above, rows below) with which ``module``, a causal convolution, pads its own input in
    its ``forward`` (``F.pad``, any mode) before a convolution that pads no rows itself; None for a
    module that does not. Two conventions of diffusers' causal 3-D convolutions, told by their
    attributes (no class names, no diffusers import):

    * an ``nn.Conv3d`` whose ``_padding`` holds the ``F.pad`` amounts (w, w, h, h, t, 0) and whose
      own ``padding`` is zeroed: ``WanCausalConv3d``, ``QwenImageCausalConv3d``;
    * a module holding ``time_causal_padding`` (the same order) and its convolution ``conv``
      with no height padding: ``HunyuanVideoCausalConv3d`` (replicate padding),
      ``CogVideoXCausalConv3d`` in its ``replicate`` mode (in its other modes its ``conv`` pads
      the rows itself: a plain convolution here).
    """
    pads = getattr(module, "_padding", None)
    if isinstance(module, nn.Conv3d) and isinstance(pads, tuple) and len(pads) == 6:
        return int(pads[2]), int(pads[3])
    pads = getattr(module, "time_causal_padding", None)
    conv = getattr(module, "conv", None)
    if isinstance(pads, tuple) and len(pads) == 6 and _is_conv(conv) and _plain_height_padding(conv) == 0:
        return int(pads[2]), int(pads[3])
    return None


def _conv_of(module: nn.Module) -> nn.Module:
    """The convolution doing ``module``'s work: itself, or its ``conv`` (a padding-in-forward wrapper)."""
    return module if _is_conv(module) else module.conv


def _plain_height_padding(conv: nn.Module) -> int | str:
    if isinstance(conv.padding, str):
        return conv.padding
    return int(conv.padding[_height_axis(conv)])


def _height_padding(module: nn.Module) -> int | str:
    """The rows ``module`` pads above (and below) its input: in its forward, or its conv's padding."""
    pads = padding_in_forward(module)
    if pads is not None:
        if pads[0] != pads[1]:
            raise ValueError(f"{type(module).__name__} pads {pads[0]} rows above and {pads[1]} below: "
                             "only the same padding on both sides is supported")
        return pads[0]
    return _plain_height_padding(module)


def halo_rows(conv: nn.Module) -> int:
    """Rows a band needs from each neighbour for ``conv`` (a convolution, or a causal convolution
    that pads in its forward: :func:`padding_in_forward`; 0 for a one-row-high kernel);
    ``ValueError`` when the convolution cannot run on bands exactly."""
    name = type(conv).__name__
    inner = _conv_of(conv)
    axis = _height_axis(inner)
    k, stride, dilation = inner.kernel_size[axis], inner.stride[axis], inner.dilation[axis]
    if stride != 1:
        raise ValueError(f"{name} has stride {stride} along the height: a strided convolution cannot be "
                         "decoded by row bands exactly (only stride 1 is supported)")
    if dilation != 1:
        raise ValueError(f"{name} has dilation {dilation} along the height: only dilation 1 is supported")
    if k == 1:
        return 0
    if k % 2 == 0:
        raise ValueError(f"{name} has an even kernel height {k}: only odd kernels are supported")
    p = (k - 1) // 2
    pad = _height_padding(conv)
    if pad != p and pad != "same":
        raise ValueError(f"{name} has kernel height {k} and padding {pad!r} along the height: only the 'same' "
                         f"padding {p} (output as tall as the input) is supported")
    return p


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


# --------------------------------------------------------------------------------------
# group norm
# --------------------------------------------------------------------------------------

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


# --------------------------------------------------------------------------------------
# attention
# --------------------------------------------------------------------------------------

def attention_types() -> tuple[type, ...]:
    """The blocks :class:`GatherRows` runs on the whole tensor: diffusers' ``Attention`` (the
    ``AutoencoderKL`` mid block, on a [B, C, H, W] tensor), ``WanAttentionBlock`` (the Wan2.1
    decoder) and its copy ``QwenImageAttentionBlock``, and ``HunyuanVideoMidBlock3D`` whole (its
    attention flattens frames x rows x columns into one token axis under a frame-causal mask built
    from the tensor's shape: a band's tokens are not a band of the rows)."""
    from diffusers.models.attention_processor import Attention
    from diffusers.models.autoencoders.autoencoder_kl_hunyuan_video import HunyuanVideoMidBlock3D
    from diffusers.models.autoencoders.autoencoder_kl_qwenimage import QwenImageAttentionBlock
    from diffusers.models.autoencoders.autoencoder_kl_wan import WanAttentionBlock

    return (Attention, WanAttentionBlock, QwenImageAttentionBlock, HunyuanVideoMidBlock3D)


class GatherRows(nn.Module):
    """Runs ``inner`` on the whole tensor: the bands are gathered along dim -2 (every rank
    gets all of it), ``inner`` runs unchanged, and this rank's rows of its output are
    returned. Further arguments go to ``inner`` as given (they must not be row bands)."""

    def __init__(self, inner: nn.Module, group: dist.ProcessGroup | None) -> None:
        super().__init__()
        self.inner = inner
        self.group = group

    def forward(self, hidden_states: torch.Tensor, *args, **kwargs) -> torch.Tensor:
        if hidden_states.dim() < 4:
            raise ValueError(f"{type(self.inner).__name__} got a {hidden_states.dim()}-D tensor: its dim -2 is not "
                             "the image rows, so the parallel decode cannot gather it by rows")
        mine = torch.tensor([hidden_states.shape[-2]], dtype=torch.int64, device=hidden_states.device)
        counts = [int(c.item()) for c in _all_gather(mine, self.group)]
        whole = gather_rows(hidden_states, self.group, counts)
        out = self.inner(whole, *args, **kwargs)
        rank = dist.get_rank(self.group)
        start = head_offsets(counts)[rank]
        return out[..., start:start + counts[rank], :]


# --------------------------------------------------------------------------------------
# the surgery
# --------------------------------------------------------------------------------------

def _check_upsample(name: str, module: nn.Upsample) -> None:
    if module.size is not None:
        raise ValueError(f"{name} ({type(module).__name__}) upsamples to a fixed size: a band would be stretched "
                         "to the whole image's size")
    factors = module.scale_factor if isinstance(module.scale_factor, tuple) else (module.scale_factor,)
    if module.mode not in ("nearest", "nearest-exact") or any(float(f) != int(f) for f in factors):
        raise ValueError(f"{name} ({type(module).__name__}) upsamples with mode {module.mode!r} by {factors}: "
                         "only nearest upsampling by whole factors is exact on row bands")


def _replacement(name: str, module: nn.Module, group: dist.ProcessGroup | None,
                 attention: tuple[type, ...]) -> nn.Module | None:
    """What replaces ``module`` (``None``: keep it); ``ValueError`` for what cannot be exact."""
    kind = type(module).__name__
    if isinstance(module, attention):
        return GatherRows(module, group)
    noise = getattr(module, "per_channel_scale1", None)
    if noise is not None:
        raise ValueError(f"{name} is a {kind} that injects noise drawn in its forward for the rows it has "
                         "(decoder_inject_noise): a band would draw other noise than the whole image")
    if padding_in_forward(module) is not None:  # a causal conv padding itself: the halo around all of it
        try:
            p = halo_rows(module)
        except ValueError as err:
            raise ValueError(f"{name}: {err}") from None
        return HaloConv(module, group) if p > 0 else None
    if isinstance(module, _REFUSED) or kind == "SpatialNorm":
        raise ValueError(f"{name} is a {kind}: the parallel decode cannot make it exact on row bands")
    if "Attention" in kind:
        raise ValueError(f"{name} is a {kind}, an attention block the parallel decode does not know: "
                         "add its class to attention_types= so it runs on the whole tensor")
    if isinstance(module, nn.Upsample):
        _check_upsample(name, module)
        return None
    if _is_conv(module):
        try:
            p = halo_rows(module)
        except ValueError as err:
            raise ValueError(f"{name}: {err}") from None
        return HaloConv(module, group) if p > 0 else None
    if isinstance(module, nn.GroupNorm):
        return DistGroupNorm(module, group)
    return None


def _replacements(root: nn.Module, prefix: str, group: dist.ProcessGroup | None,
                  attention: tuple[type, ...]) -> list[tuple[str, nn.Module]]:
    """(name in ``root``, replacement) for every module of ``root`` to replace; nothing
    inside a replaced module (an attention block sees the whole tensor, a causal convolution's
    own ``conv`` sees the band its halo extended)."""
    found: list[tuple[str, nn.Module]] = []
    inside: list[str] = []
    for name, module in root.named_modules(remove_duplicate=False):
        if any(name.startswith(a + ".") for a in inside):
            continue
        new = _replacement(f"{prefix}{name}" if name else prefix.rstrip("."), module, group, attention)
        if new is not None:
            found.append((name, new))
            inside.append(name)
    return found


def _set_submodule(root: nn.Module, name: str, module: nn.Module) -> None:
    parent_name, _, child = name.rpartition(".")
    parent = root.get_submodule(parent_name) if parent_name else root
    setattr(parent, child, module)


def _copy_sharing_weights(vae: nn.Module) -> nn.Module:
    """A deep copy of the module tree whose parameters and buffers are the original's."""
    memo: dict[int, object] = {id(t): t for t in vae.parameters()}
    memo.update({id(t): t for t in vae.buffers()})
    return copy.deepcopy(vae, memo)


def parallelize_decoder(vae: nn.Module, group: dist.ProcessGroup | None = None,
                        attention: tuple[type, ...] | None = None,
                        parts: tuple[str, ...] = ("post_quant_conv", "decoder")) -> nn.Module:
    """A copy of ``vae`` whose ``decoder`` and ``post_quant_conv`` run on row bands over
    ``group`` (``None``: the default group): halo convolutions, whole-image group norms,
    attention on the gathered tensor (see the module docstring). The encoder is left as it is.
    The copy shares the original's parameters and buffers; ``use_tiling`` is off in it.

    ``attention``: the attention block classes (default :func:`attention_types`); ``parts``:
    the VAE's submodules made row-parallel (:func:`row_parallel_vae`: the decoder only).
    ``ValueError`` when the decoder holds something that cannot be exact on row bands.
    Decode with :func:`decode_rows`, on every rank of ``group``.
    """
    attention = attention_types() if attention is None else tuple(attention)
    pvae = _copy_sharing_weights(vae)
    for part in parts:
        root = getattr(pvae, part, None)
        if root is None:
            continue
        swaps = _replacements(root, part + ".", group, attention)
        for name, new in swaps:
            if name:
                _set_submodule(root, name, new)
            else:
                setattr(pvae, part, new)
    if hasattr(pvae, "use_tiling"):
        pvae.use_tiling = False
    return pvae


# --------------------------------------------------------------------------------------
# decode
# --------------------------------------------------------------------------------------

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
