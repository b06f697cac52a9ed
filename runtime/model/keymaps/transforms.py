"""The name tables' transforms on tensors (the tables name them: sporch.orchestrator.models.keymap).

Each takes the source tensor(s) of one sporch parameter, the model config and the parameter's
leaf name (``weight``, ``bias``) and returns the tensor in sporch's layout.
"""

from __future__ import annotations

from typing import Callable, Sequence

import torch

from typing import Any as ModelConfig  # the hand-built models' config (a transform reads its patch, out_dim)

Transform = Callable[[Sequence[torch.Tensor], ModelConfig, str], torch.Tensor]


def copy(ts: Sequence[torch.Tensor], cfg: ModelConfig, leaf: str) -> torch.Tensor:
    return ts[0]


def cat(ts: Sequence[torch.Tensor], cfg: ModelConfig, leaf: str) -> torch.Tensor:
    """Projections stored separately (q, k, v[, mlp]) -> one fused projection (rows stacked)."""
    return torch.cat(list(ts), dim=0)


def conv_as_linear(ts: Sequence[torch.Tensor], cfg: ModelConfig, leaf: str) -> torch.Tensor:
    """Conv3d/Conv2d patch embedding [D, C, pt, ph, pw] -> Linear over (C, pt, ph, pw) features."""
    t = ts[0]
    return t.reshape(t.shape[0], -1) if leaf == "weight" else t


def rows_channel_last_to_first(ts: Sequence[torch.Tensor], cfg: ModelConfig, leaf: str) -> torch.Tensor:
    """Output head rows ordered (pt, ph, pw, C) (Wan, both formats) -> sporch's (C, pt, ph, pw)."""
    t = ts[0]
    pt, ph, pw = cfg.patch
    if t.shape[0] != cfg.patch_out:
        return t  # the shape check reports it
    rest = tuple(t.shape[1:])
    return t.reshape(pt, ph, pw, cfg.out_dim, *rest).movedim(3, 0).reshape(cfg.patch_out, *rest)


def swap_halves(ts: Sequence[torch.Tensor], cfg: ModelConfig, leaf: str) -> torch.Tensor:
    """(scale, shift) -> (shift, scale) rows (diffusers' AdaLayerNormContinuous)."""
    a, b = ts[0].chunk(2, dim=0)
    return torch.cat([b, a], dim=0)


#: Transform name (as the tables write it) -> its function.
TRANSFORMS: dict[str, Transform] = {
    "copy": copy, "cat": cat, "conv_as_linear": conv_as_linear,
    "rows_channel_last_to_first": rows_channel_last_to_first, "swap_halves": swap_halves,
}