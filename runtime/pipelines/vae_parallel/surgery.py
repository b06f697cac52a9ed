"""The module surgery: which module of a VAE's decoder becomes what on row bands (a halo
convolution, a whole-image group norm, attention on the gathered tensor, or left as it is), what
is refused as not exact, and the copy of the VAE that holds the replacements
(:func:`parallelize_decoder`)."""

from __future__ import annotations

import copy

import torch.distributed as dist
from torch import nn

from sporch.runtime.pipelines.vae_parallel.conv_geometry import _is_conv, halo_rows, padding_in_forward
from sporch.runtime.pipelines.vae_parallel.gathered_attention import GatherRows, attention_types
from sporch.runtime.pipelines.vae_parallel.group_norm import DistGroupNorm
from sporch.runtime.pipelines.vae_parallel.halo_conv import HaloConv

__all__ = ["parallelize_decoder"]

#: Modules that mix rows in a way a band cannot reproduce; refused anywhere in the decoder
#: outside an attention block.
_REFUSED = (nn.ConvTranspose1d, nn.ConvTranspose2d, nn.ConvTranspose3d, nn.MaxPool2d, nn.MaxPool3d, nn.AvgPool2d,
            nn.AvgPool3d, nn.AdaptiveAvgPool2d, nn.AdaptiveAvgPool3d, nn.AdaptiveMaxPool2d, nn.AdaptiveMaxPool3d,
            nn.BatchNorm2d, nn.BatchNorm3d, nn.InstanceNorm2d, nn.InstanceNorm3d, nn.PixelShuffle,
            nn.PixelUnshuffle, nn.Conv1d)


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
