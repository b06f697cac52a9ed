"""What every DiT variant shares: patchify/unpatchify, conditions, and the token-level
forward that works the same unsharded (ctx=None) and on one sequence shard."""

from __future__ import annotations

from typing import NamedTuple, Sequence

import torch
from torch import nn

from sporch.runtime.parallel import ParallelContext

from .attention import SequenceAttention
from .cache import StepCache
from .condition import Condition, cond_to
from .config import ModelConfig
from .rope import rope_cos_sin


def block_lists(model: nn.Module) -> list[tuple[str, nn.ModuleList]]:
    """The model's transformer block lists: direct ``nn.ModuleList`` children whose name ends
    in ``blocks`` (``blocks``; ``double_blocks``, ``single_blocks``): the units compiling and
    weight sharding work on."""
    return [(name, child) for name, child in model.named_children()
            if isinstance(child, nn.ModuleList) and name.endswith("blocks")]


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
    """Inverse of :func:`patchify`: [B, f*h*w, C*pt*ph*pw] -> [B, C, f*pt, h*ph, w*pw]. Features
    are read as (C, pt, ph, pw) like the input side: a checkpoint whose output head is ordered
    otherwise (Wan: (pt, ph, pw, C)) has its rows permuted when it is loaded (keymaps/)."""
    b = tokens.shape[0]
    f, h, w = (int(g) for g in grid)
    pt, ph, pw = (int(p) for p in patch)
    x = tokens.reshape(b, f, h, w, channels, pt, ph, pw).permute(0, 4, 1, 5, 2, 6, 3, 7)
    return x.reshape(b, channels, f * pt, h * ph, w * pw)


def latent_shape(cfg: ModelConfig, grid: Sequence[int], batch: int = 1, channels: int | None = None) -> tuple[int, ...]:
    """Latent tensor shape whose patchified token grid is ``grid`` (the noisy latents: the
    model's output channels; a latent condition adds ``cfg.cond_channels``)."""
    f, h, w = (int(g) for g in grid)
    pt, ph, pw = cfg.patch
    c = cfg.out_dim if channels is None else channels
    return (batch, c, f * pt, h * ph, w * pw)


def batch_timesteps(timestep, batch: int) -> torch.Tensor:
    """``timestep`` (scalar, [B] or [B, seq_len] one per token of the whole sequence; B may be 1)
    as float32 [batch] or [batch, seq_len]."""
    t = torch.as_tensor(timestep, dtype=torch.float32)
    t = t if t.dim() == 2 else t.reshape(-1)
    return t.expand(batch, *t.shape[1:]) if t.shape[0] == 1 else t


class TokenTimesteps(NamedTuple):
    """Timesteps per token on this rank: ``local`` [B, n] its tokens', ``top`` [B] each sample's
    largest over the whole sequence (the same on every rank, so a decision taken on it, such as
    TeaCache's, agrees across ranks even where a rank holds only tokens at timestep 0)."""

    local: torch.Tensor
    top: torch.Tensor


class DiTBase(nn.Module):
    """Subclasses implement ``_forward(tokens, timestep, cond, rope, attn)`` on token tensors
    [B, N, patch_in] -> [B, N, patch_out]; every per-token op there is local, and all mixing
    across tokens goes through ``attn`` (a :class:`SequenceAttention`)."""

    cfg: ModelConfig
    #: ``_forward`` takes a timestep per token ([B, N]) as well as one per sample ([B])
    per_token_timesteps = False

    # -- conditions ------------------------------------------------------------------------
    def make_condition(self, batch: int, generator: torch.Generator, grid: Sequence[int] | None = None) -> Condition:
        """A random condition for ``batch`` samples (stand-in for the encoders / labels):
        text embeddings [B, text_len, text_dim] (float32) or class labels [B] (long); a dict
        (sporch.runtime.model.condition) when the model also takes a pooled vector, CLIP image tokens
        or a latent condition (that one needs the token ``grid``)."""
        cfg = self.cfg
        if not cfg.has_text:
            return torch.randint(0, cfg.num_classes, (batch,), generator=generator)
        text = torch.randn(batch, cfg.text_len, cfg.text_dim, generator=generator)
        if not (cfg.pooled_dim or cfg.image_dim or cfg.cond_channels):
            return text
        cond = {"text": text}
        if cfg.pooled_dim:
            cond["pooled"] = torch.randn(batch, cfg.pooled_dim, generator=generator)
        if cfg.image_dim:
            cond["image"] = torch.randn(batch, cfg.image_len, cfg.image_dim, generator=generator)
        if cfg.cond_channels:
            if grid is None:
                raise ValueError("a model with a latent condition needs the token grid for make_condition")
            cond["latents"] = torch.randn(latent_shape(cfg, grid, batch, cfg.cond_channels), generator=generator)
        return cond

    def null_condition(self, cond: Condition) -> Condition:
        """The unconditional input for classifier-free guidance: zero text (and pooled text) /
        the null class; image conditions are kept (the negative prompt replaces the text only)."""
        if not self.cfg.has_text:
            return torch.full_like(cond, self.cfg.num_classes)
        if isinstance(cond, dict):
            return {k: torch.zeros_like(v) if k in ("text", "pooled") else v for k, v in cond.items()}
        return torch.zeros_like(cond)

    # -- forward ---------------------------------------------------------------------------
    def forward_tokens(
        self,
        tokens: torch.Tensor,
        timestep: torch.Tensor,
        cond: Condition,
        *,
        grid: Sequence[int],
        token_index: torch.Tensor | None = None,
        seq_len: int | None = None,
        ctx: ParallelContext | None = None,
        backend: str = "auto",
        guidance: float | torch.Tensor | None = None,
        step_cache: StepCache | None = None,
        head_counts: Sequence[int] | None = None,
    ) -> torch.Tensor:
        """Token-level forward. Unsharded: ``tokens`` are all f*h*w tokens. Sharded: this
        rank's chunk, ``token_index`` its global indices (padding indices >= seq_len allowed)
        and ``ctx`` the ParallelContext. ``timestep``: scalar, [B], or [B, seq_len] (one per token
        of the whole sequence, Wan2.2 TI2V; each rank takes its tokens' with ``token_index``).
        ``guidance``: the embedded guidance scale of a guidance-distilled model (Flux.1-dev).
        ``step_cache``: a :class:`~sporch.runtime.model.cache.StepCache` that may skip the blocks
        this step. ``head_counts``: the query heads per Ulysses rank the Plan recorded
        (``plan.heads.q_heads_per_rank``; None: split by the contract's rule). Returns
        [B, N, patch_out] in the model dtype."""
        n = tokens.shape[1]
        f, h, w = (int(g) for g in grid)
        if seq_len is None:
            seq_len = f * h * w
        if token_index is None:
            token_index = torch.arange(n)
        dtype, device = self.dtype, self.device
        cfg = self.cfg
        cos, sin = rope_cos_sin(token_index, (f, h, w), cfg.head_dim, seq_len, cfg.rope_theta, cfg.rope_axes)
        rope = (cos.to(device), sin.to(device))
        attn = SequenceAttention(ctx=ctx, seq_len=seq_len, backend=backend, head_counts=head_counts)
        b = tokens.shape[0]
        whole = batch_timesteps(timestep, b).to(device)
        if whole.dim() == 2:  # one per token of the whole sequence: this rank's tokens' (padding: any valid one)
            if not self.per_token_timesteps:
                raise ValueError(f"{type(self).__name__} takes one timestep per sample, not one per token "
                                 "(per-token timesteps are Wan2.2 TI2V's)")
            timestep = TokenTimesteps(whole[:, token_index.clamp(max=seq_len - 1).to(device)], whole.amax(dim=1))
        else:
            timestep = whole
        if guidance is not None:
            guidance = torch.as_tensor(guidance, dtype=torch.float32).reshape(-1).to(device).expand(b)
        cond = cond_to(cond, device, dtype)
        if isinstance(cond, dict) and "latents" in cond:
            # the latent condition's tokens at this rank's global indices (padding: any valid one)
            y_tokens = patchify(cond["latents"], cfg.patch)[0]
            tokens = torch.cat([tokens.to(device), y_tokens[:, token_index.clamp(max=seq_len - 1).to(device)]], -1)
        step = None if step_cache is None else step_cache.bind(token_index < seq_len, ctx)
        return self._forward(tokens.to(device=device, dtype=dtype), timestep, cond, rope, attn, guidance=guidance,
                             step=step)

    def forward(self, latents: torch.Tensor, timestep: torch.Tensor, cond: Condition,
                guidance: float | torch.Tensor | None = None) -> torch.Tensor:
        """Unsharded reference: latents [B, out_channels, F, H, W] -> velocity of the same shape."""
        tokens, grid = patchify(latents, self.cfg.patch)
        out = self.forward_tokens(tokens, timestep, cond, grid=grid, guidance=guidance)
        return unpatchify(out, grid, self.cfg.patch, self.cfg.out_dim)

    def _forward(self, tokens, timestep, cond, rope, attn, guidance=None, step=None):  # pragma: no cover - abstract
        raise NotImplementedError

    @property
    def dtype(self) -> torch.dtype:
        return next(self.parameters()).dtype

    @property
    def device(self) -> torch.device:
        return next(self.parameters()).device

    def num_parameters(self) -> int:
        return sum(p.numel() for p in self.parameters())
