"""Wan2.1 video DiT ("cross"): 3D patch embedding, 3D RoPE self-attention with qk RMSNorm,
cross-attention to text tokens (whole on every rank; plus CLIP image tokens for I2V), GELU(tanh)
FFN, adaLN with six modulation vectors from the time embedding, final layer, unpatchify.

With the published shapes this is Wan2.1 exactly (tests/runtime/model/test_published.py compares it
with diffusers' WanTransformer3DModel). Parameter names are sporch's own; the published
checkpoints' names, the Conv3d patch embedding and the output head's row order are mapped by
the Wan2.1 name table (sporch.orchestrator.models.wan)."""

from __future__ import annotations

from typing import NamedTuple

import torch
import torch.nn.functional as F
from torch import nn

from .attention import SequenceAttention, sdpa
from .base import DiTBase, TokenTimesteps
from .condition import cond_text
from .config import ModelConfig
from .layers import MLP, RMSNorm, TimestepEmbedder, gate, layer_norm, modulate
from .rope import apply_rope

FP32 = torch.float32


class TokenTime(NamedTuple):
    """Per-token time conditioning (Wan2.2 TI2V) as a table and an index: ``table`` [U, ...]
    holds the embedding of each distinct timestep (TI2V's tokens have two: 0 for the given first
    frame, t for the rest), ``index`` [B, N] picks each token's row. Gathering at the point of use
    keeps the per-token tensors as big as one activation instead of [B, N, 6, D]."""

    table: torch.Tensor
    index: torch.Tensor

    def rows(self, table: torch.Tensor) -> list[torch.Tensor]:
        """``table`` [U, k, D] (this embedding plus a module's modulation) -> k tensors [B, N, D]."""
        return [table[:, j][self.index] for j in range(table.shape[1])]


def time_vectors(modulation: torch.Tensor, e) -> list[torch.Tensor]:
    """adaLN vectors ``modulation`` [1, k, D] + the time projection ``e``: k tensors [B, D] (one
    timestep per sample, ``e`` [B, k, D]) or [B, N, D] (per token, ``e`` a :class:`TokenTime`)."""
    if isinstance(e, TokenTime):
        return e.rows(modulation + e.table)
    return list((modulation + e).unbind(1))


class WanSelfAttention(nn.Module):
    def __init__(self, cfg: ModelConfig, device=None, dtype=None) -> None:
        super().__init__()
        d, kv = cfg.hidden, cfg.num_kv_heads * cfg.head_dim
        self.num_heads, self.num_kv_heads, self.head_dim = cfg.num_heads, cfg.num_kv_heads, cfg.head_dim
        self.q = nn.Linear(d, d, device=device, dtype=dtype)
        self.k = nn.Linear(d, kv, device=device, dtype=dtype)
        self.v = nn.Linear(d, kv, device=device, dtype=dtype)
        self.o = nn.Linear(d, d, device=device, dtype=dtype)
        self.norm_q = RMSNorm(d, cfg.eps, device, dtype) if cfg.qk_norm else nn.Identity()
        self.norm_k = RMSNorm(kv, cfg.eps, device, dtype) if cfg.qk_norm else nn.Identity()

    def forward(self, x: torch.Tensor, rope, attn: SequenceAttention) -> torch.Tensor:
        b, n, _ = x.shape
        q = self.norm_q(self.q(x)).view(b, n, self.num_heads, self.head_dim)
        k = self.norm_k(self.k(x)).view(b, n, self.num_kv_heads, self.head_dim)
        v = self.v(x).view(b, n, self.num_kv_heads, self.head_dim)
        q, k = apply_rope(q, *rope), apply_rope(k, *rope)
        return self.o(attn(q, k, v).reshape(b, n, -1))


class WanCrossAttention(WanSelfAttention):
    """Queries from the (local) video tokens, keys/values from all text tokens: no
    communication, the text is whole on every rank. Same projections as self-attention. With
    image conditioning (Wan I2V) a second attention over the CLIP image tokens, with its own
    key/value projections, is added before the output projection."""

    def __init__(self, cfg: ModelConfig, device=None, dtype=None) -> None:
        super().__init__(cfg, device, dtype)
        if cfg.image_dim:
            d, kv = cfg.hidden, cfg.num_kv_heads * cfg.head_dim
            self.k_img = nn.Linear(d, kv, device=device, dtype=dtype)
            self.v_img = nn.Linear(d, kv, device=device, dtype=dtype)
            self.norm_k_img = RMSNorm(kv, cfg.eps, device, dtype) if cfg.qk_norm else nn.Identity()

    def forward(self, x: torch.Tensor, context: torch.Tensor,  # type: ignore[override]
                context_img: torch.Tensor | None = None) -> torch.Tensor:
        b, n, _ = x.shape
        q = self.norm_q(self.q(x)).view(b, n, self.num_heads, self.head_dim)
        k = self.norm_k(self.k(context)).view(b, -1, self.num_kv_heads, self.head_dim)
        v = self.v(context).view(b, -1, self.num_kv_heads, self.head_dim)
        out = sdpa(q, k, v)
        if context_img is not None:
            k = self.norm_k_img(self.k_img(context_img)).view(b, -1, self.num_kv_heads, self.head_dim)
            v = self.v_img(context_img).view(b, -1, self.num_kv_heads, self.head_dim)
            out = out + sdpa(q, k, v)
        return self.o(out.reshape(b, n, -1))


class WanBlock(nn.Module):
    """The residual stream ``x``, the modulation table and the cross-attention norm stay in
    float32 (as in Wan2.1 and diffusers); the attention and FFN inputs are cast to the model dtype."""

    def __init__(self, cfg: ModelConfig, device=None, dtype=None) -> None:
        super().__init__()
        self.eps = cfg.eps
        self.self_attn = WanSelfAttention(cfg, device, dtype)
        self.norm3 = nn.LayerNorm(cfg.hidden, eps=cfg.eps, device=device, dtype=FP32)
        self.cross_attn = WanCrossAttention(cfg, device, dtype)
        self.ffn = MLP(cfg.hidden, cfg.ffn_dim, device=device, dtype=dtype)
        self.modulation = nn.Parameter(torch.empty(1, 6, cfg.hidden, device=device, dtype=FP32))

    def forward(self, x, e, context, context_img, rope, attn: SequenceAttention):
        # x: [B, N, D] float32; e: [B, 6, D] float32 time projection (or per token: TokenTime)
        dt = self.ffn.fc1.weight.dtype
        shift_msa, scale_msa, gate_msa, shift_mlp, scale_mlp, gate_mlp = time_vectors(self.modulation, e)
        y = self.self_attn(modulate(layer_norm(x, self.eps), shift_msa, scale_msa).to(dt), rope, attn)
        x = x + gate(y.float(), gate_msa)
        x = x + self.cross_attn(self.norm3(x).to(dt), context, context_img).float()
        y = self.ffn(modulate(layer_norm(x, self.eps), shift_mlp, scale_mlp).to(dt))
        return x + gate(y.float(), gate_mlp)


class WanHead(nn.Module):
    """Final adaLN + projection, all in float32 (as Wan2.1 runs its head)."""

    def __init__(self, cfg: ModelConfig, device=None, dtype=None) -> None:
        super().__init__()
        self.eps = cfg.eps
        self.head = nn.Linear(cfg.hidden, cfg.patch_out, device=device, dtype=FP32)
        self.modulation = nn.Parameter(torch.empty(1, 2, cfg.hidden, device=device, dtype=FP32))

    def forward(self, x, e):
        if isinstance(e, TokenTime):  # [U, D] rows -> [U, 1, D]
            e = TokenTime(e.table[:, None], e.index)
        else:
            e = e[:, None]
        shift, scale = time_vectors(self.modulation, e)
        return self.head(modulate(layer_norm(x, self.eps), shift, scale))


class WanImageEmbedding(nn.Module):
    """CLIP image tokens -> model width: LayerNorm, Linear, GELU, Linear, LayerNorm (norms in float32)."""

    def __init__(self, cfg: ModelConfig, device=None, dtype=None) -> None:
        super().__init__()
        self.norm1 = nn.LayerNorm(cfg.image_dim, device=device, dtype=FP32)
        self.fc1 = nn.Linear(cfg.image_dim, cfg.image_dim, device=device, dtype=dtype)
        self.fc2 = nn.Linear(cfg.image_dim, cfg.hidden, device=device, dtype=dtype)
        self.norm2 = nn.LayerNorm(cfg.hidden, device=device, dtype=FP32)

    def forward(self, image: torch.Tensor) -> torch.Tensor:
        dt = self.fc1.weight.dtype
        h = self.fc2(F.gelu(self.fc1(self.norm1(image.float()).to(dt))))
        return self.norm2(h.float()).to(dt)


class WanDiT(DiTBase):
    """Wan2.1 text-to-video (and, with ``image_dim``, image-to-video). The time embedding and
    projection, the modulation tables, the residual stream and the head run in float32 in
    every dtype; the output is float32."""

    def __init__(self, cfg: ModelConfig, device=None, dtype=None) -> None:
        super().__init__()
        if cfg.attention != "cross":
            raise ValueError("WanDiT needs attention 'cross'")
        self.cfg = cfg
        d = cfg.hidden
        self.patch_embedding = nn.Linear(cfg.patch_in, d, device=device, dtype=dtype)
        self.text_embedding = MLP(cfg.text_dim, d, d, device=device, dtype=dtype)
        self.time_embedding = TimestepEmbedder(cfg.freq_dim, d, device=device, dtype=FP32)
        self.time_projection = nn.Linear(d, 6 * d, device=device, dtype=FP32)
        if cfg.image_dim:
            self.img_emb = WanImageEmbedding(cfg, device, dtype)
        self.blocks = nn.ModuleList(WanBlock(cfg, device, dtype) for _ in range(cfg.depth))
        self.head = WanHead(cfg, device, dtype)

    per_token_timesteps = True

    def _time(self, timestep):
        """The time embedding ``e`` and its projection ``e0`` [B, D], [B, 6, D] and the step cache's
        probe [B, 6 * D] (``e0``). Timesteps per token (a :class:`TokenTimesteps`, Wan2.2 TI2V):
        ``e`` and ``e0`` as :class:`TokenTime` (each distinct timestep embedded once) and the probe
        the projection of the sample's largest timestep over the whole sequence, as on every rank."""
        per_token = isinstance(timestep, TokenTimesteps)
        if per_token:  # the distinct values of this rank's tokens' timesteps and each sample's largest
            values, index = torch.unique(torch.cat([timestep.local, timestep.top[:, None]], dim=1), return_inverse=True)
        e = self.time_embedding(values if per_token else timestep)
        e0 = self.time_projection(F.silu(e)).unflatten(1, (6, -1))
        if not per_token:
            return e, e0, e0.flatten(1)
        mine = index[:, :-1]
        return TokenTime(e, mine), TokenTime(e0, mine), e0.flatten(1)[index[:, -1]]

    def _forward(self, tokens, timestep, cond, rope, attn, guidance=None, step=None):
        x = self.patch_embedding(tokens).float()
        e, e0, probe = self._time(timestep)
        context = self.text_embedding(cond_text(cond))
        context_img = self.img_emb(cond["image"]) if self.cfg.image_dim else None
        if step is None:
            for block in self.blocks:
                x = block(x, e0, context, context_img, rope, attn)
            return self.head(x, e)

        def rest(x):
            for block in self.blocks[1:]:
                x = block(x, e0, context, context_img, rope, attn)
            return x

        # TeaCache on Wan2.1 compares the time projection e0 (its published coefficients are fitted on it;
        # per-token timesteps: the largest over the whole sequence)
        x = step.run(x, lambda x: self.blocks[0](x, e0, context, context_img, rope, attn), rest,
                     lambda x: probe[:, None], probe_per_token=False)
        return self.head(x, e)
