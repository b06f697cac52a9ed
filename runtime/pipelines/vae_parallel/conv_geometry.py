"""The rows a convolution reads beyond a band of rows (:func:`halo_rows`), from its kernel, stride,
dilation and height padding, its own or padded in its forward (:func:`padding_in_forward`);
``ValueError`` for a convolution that cannot run on row bands exactly. ``_is_conv`` (a plain
2-D/3-D convolution) is private to the package."""

from __future__ import annotations

from torch import nn

__all__ = ["halo_rows", "padding_in_forward"]


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
