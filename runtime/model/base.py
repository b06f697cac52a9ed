"""What every DiT variant shares: patchify/unpatchify, conditions, and the token-level
forward that works the same unsharded (ctx=None) and on one sequence shard."""

from __future__ import annotations

from typing import Any, Sequence

import torch
from torch import nn

from .attention import SequenceAttention
from .config import ModelConfig
from .rope import rope_cos_sin


def patchify(latents: torch.Tensor, patch: Sequence[int]) -> tuple[torch.Tensor, tuple[int, int, int]]:
    """[B, C, F, H, W] -> tokens [B, f*h*w, C*pt*ph*pw] (f-major, w-minor; features ordered
    (C, pt, ph, pw), i.e. a Conv3d weight with stride == kernel flattened), and the grid."""
    b, c, fr, hh, ww = latents.shape
    pt, ph, pw = (int(p) for p in patch)
    if fr % pt or hh % ph or ww % pw:
        raise ValueError(f"latent shape {tuple(latents.shape)} not divisible by patch {tuple(patch)}")
    f, h, w = fr // pt, hh // ph, ww // pw
    x = latents.reshape(b, c, f, pt, h, ph, w, pw).permute(0, 2, 4, 6, 1, 3, 5, 7)
    return x.reshape(b, f * h * w, c * pt * ph * pw), (f, h, w)


def unpatchify(tokens: torch.Tensor, grid: Sequence[int], patch: Sequence[int], channels: int) -> torch.Tensor:
    """Inverse of :func:`patchify`: [B, f*h*w, C*pt*ph*pw] -> [B, C, f*pt, h*ph, w*pw]."""
    b = tokens.shape[0]
    f, h, w = (int(g) for g in grid)
    pt, ph, pw = (int(p) for p in patch)
    x = tokens.reshape(b, f, h, w, channels, pt, ph, pw).permute(0, 4, 1, 5, 2, 6, 3, 7)
    return x.reshape(b, channels, f * pt, h * ph, w * pw)


def latent_shape(cfg: ModelConfig, grid: Sequence[int], batch: int = 1, channels: int | None = None) -> tuple[int, ...]:
    """Latent tensor shape whose patchified token grid is ``grid``."""
    f, h, w = (int(g) for g in grid)
    pt, ph, pw = cfg.patch
    c = cfg.in_channels if channels is None else channels
    return (batch, c, f * pt, h * ph, w * pw)


class DiTBase(nn.Module):
    """Subclasses implement ``_forward(tokens, timestep, cond, rope, attn)`` on token tensors
    [B, N, patch_in] -> [B, N, patch_out]; every per-token op there is local, and all mixing
    across tokens goes through ``attn`` (a :class:`SequenceAttention`)."""

    cfg: ModelConfig

    # -- conditions ------------------------------------------------------------------------
    def make_condition(self, batch: int, generator: torch.Generator) -> torch.Tensor:
        """A random condition for ``batch`` samples (stand-in for a text encoder / labels):
        text embeddings [B, text_len, text_dim] (float32) or class labels [B] (long)."""
        cfg = self.cfg
        if cfg.has_text:
            return torch.randn(batch, cfg.text_len, cfg.text_dim, generator=generator)
        return torch.randint(0, cfg.num_classes, (batch,), generator=generator)

    def null_condition(self, cond: torch.Tensor) -> torch.Tensor:
        """The unconditional input for classifier-free guidance: zero text / the null class."""
        if self.cfg.has_text:
            return torch.zeros_like(cond)
        return torch.full_like(cond, self.cfg.num_classes)

    # -- forward ---------------------------------------------------------------------------
    def forward_tokens(
        self,
        tokens: torch.Tensor,
        timestep: torch.Tensor,
        cond: torch.Tensor,
        *,
        grid: Sequence[int],
        token_index: torch.Tensor | None = None,
        seq_len: int | None = None,
        ctx: Any = None,
        backend: str = "auto",
    ) -> torch.Tensor:
        """Token-level forward. Unsharded: ``tokens`` are all f*h*w tokens. Sharded: this
        rank's chunk, ``token_index`` its global indices (padding indices >= seq_len allowed)
        and ``ctx`` the ParallelContext. Returns [B, N, patch_out] in the model dtype."""
        n = tokens.shape[1]
        f, h, w = (int(g) for g in grid)
        if seq_len is None:
            seq_len = f * h * w
        if token_index is None:
            token_index = torch.arange(n)
        dtype, device = self.dtype, self.device
        cos, sin = rope_cos_sin(token_index, (f, h, w), self.cfg.head_dim, seq_len)
        rope = (cos.to(device), sin.to(device))
        attn = SequenceAttention(ctx=ctx, seq_len=seq_len, backend=backend)
        timestep = torch.as_tensor(timestep, dtype=torch.float32).reshape(-1).to(device)
        if timestep.numel() == 1 and tokens.shape[0] > 1:
            timestep = timestep.expand(tokens.shape[0])
        cond = cond.to(device=device, dtype=dtype) if cond.is_floating_point() else cond.to(device)
        return self._forward(tokens.to(device=device, dtype=dtype), timestep, cond, rope, attn)

    def forward(self, latents: torch.Tensor, timestep: torch.Tensor, cond: torch.Tensor) -> torch.Tensor:
        """Unsharded reference: latents [B, C, F, H, W] -> velocity of the same shape."""
        tokens, grid = patchify(latents, self.cfg.patch)
        out = self.forward_tokens(tokens, timestep, cond, grid=grid)
        return unpatchify(out, grid, self.cfg.patch, self.cfg.out_dim)

    def _forward(self, tokens, timestep, cond, rope, attn):  # pragma: no cover - abstract
        raise NotImplementedError

    @property
    def dtype(self) -> torch.dtype:
        return next(self.parameters()).dtype

    @property
    def device(self) -> torch.device:
        return next(self.parameters()).device

    def num_parameters(self) -> int:
        return sum(p.numel() for p in self.parameters())
