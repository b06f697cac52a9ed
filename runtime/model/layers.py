"""Small building blocks shared by the DiT variants."""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn


class RMSNorm(nn.Module):
    """Root-mean-square norm over the last dim, learnable scale: torch's ``F.rms_norm`` (what
    diffusers' Flux and Wan use, ``torch.nn.RMSNorm``): computed in float32, rounded to x's
    dtype once; one kernel where torch has its fused ``aten._fused_rms_norm`` (CUDA) instead of
    a chain of float32 copies of x."""

    def __init__(self, dim: int, eps: float = 1e-6, device=None, dtype=None) -> None:
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(dim, device=device, dtype=dtype))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.rms_norm(x, (x.shape[-1],), self.weight, self.eps)


def layer_norm(x: torch.Tensor, eps: float = 1e-6, upcast: bool = True) -> torch.Tensor:
    """LayerNorm without affine parameters. ``upcast``: on a float32 copy of x, the result cast
    back (diffusers' ``FP32LayerNorm``, Wan); ``upcast=False``: torch's kernel on x as it is
    (``nn.LayerNorm``, Flux), which accumulates in float32 and rounds the output once, without
    writing and reading two float32 copies of the activation."""
    if not upcast:
        return F.layer_norm(x, (x.shape[-1],), eps=eps)
    return F.layer_norm(x.float(), (x.shape[-1],), eps=eps).to(x.dtype)


def modulate(x: torch.Tensor, shift: torch.Tensor, scale: torch.Tensor) -> torch.Tensor:
    """adaLN modulation: ``x * (1 + scale) + shift``; shift/scale are [B, D] or [B, 1, D]."""
    if shift.dim() == 2:
        shift = shift.unsqueeze(1)
    if scale.dim() == 2:
        scale = scale.unsqueeze(1)
    return x * (1 + scale) + shift


def gate(x: torch.Tensor, g: torch.Tensor) -> torch.Tensor:
    return x * (g.unsqueeze(1) if g.dim() == 2 else g)


#: Model units of time: the flow-matching time sigma in [0, 1] enters the model as
#: ``sigma * NUM_TRAIN_TIMESTEPS`` (Wan / SD3 convention); Flux embeds its guidance scale in the same units.
NUM_TRAIN_TIMESTEPS = 1000.0


def timestep_embedding(t: torch.Tensor, dim: int, max_period: float = 10000.0,
                       precision: torch.dtype = torch.float64) -> torch.Tensor:
    """Sinusoidal embedding of (possibly fractional) timesteps ``t`` [B] -> [B, dim] float32,
    laid out [cos | sin], computed in ``precision`` (Wan2.1: float64; Flux: float32)."""
    half = dim // 2
    freqs = torch.exp(
        -math.log(max_period) * torch.arange(half, dtype=precision, device=t.device) / half
    )
    args = t.to(precision)[:, None] * freqs[None]
    emb = torch.cat([torch.cos(args), torch.sin(args)], dim=-1)
    if dim % 2:
        emb = torch.cat([emb, torch.zeros_like(emb[:, :1])], dim=-1)
    return emb.float()


class TimestepEmbedder(nn.Module):
    """Sinusoid -> Linear -> SiLU -> Linear."""

    def __init__(self, freq_dim: int, hidden: int, device=None, dtype=None,
                 precision: torch.dtype = torch.float64) -> None:
        super().__init__()
        self.freq_dim = freq_dim
        self.precision = precision
        self.fc1 = nn.Linear(freq_dim, hidden, device=device, dtype=dtype)
        self.fc2 = nn.Linear(hidden, hidden, device=device, dtype=dtype)

    def forward(self, t: torch.Tensor) -> torch.Tensor:
        emb = timestep_embedding(t, self.freq_dim, precision=self.precision).to(self.fc1.weight.dtype)
        return self.fc2(F.silu(self.fc1(emb)))


ACTIVATIONS = {
    "gelu_tanh": lambda x: F.gelu(x, approximate="tanh"),
    "silu": F.silu,
}


class MLP(nn.Module):
    """Linear -> activation (GELU(tanh) unless ``act="silu"``) -> Linear."""

    def __init__(self, dim: int, hidden: int, out: int | None = None, device=None, dtype=None,
                 act: str = "gelu_tanh") -> None:
        super().__init__()
        self.act = ACTIVATIONS[act]
        self.fc1 = nn.Linear(dim, hidden, device=device, dtype=dtype)
        self.fc2 = nn.Linear(hidden, out if out is not None else dim, device=device, dtype=dtype)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc2(self.act(self.fc1(x)))
