"""Wan2.1-style video DiT ("cross"): 3D patch embedding, 3D RoPE self-attention with qk
RMSNorm, cross-attention to text tokens (whole on every rank), GELU(tanh) FFN, adaLN with six
modulation vectors from the time embedding, final layer, unpatchify.

Parameter names follow the structure of the public Wan2.1 layout (patch embedding as a
Linear over flattened patches instead of a Conv3d; the two are the same map)."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from .attention import SequenceAttention, sdpa
from .base import DiTBase
from .config import ModelConfig
from .layers import MLP, RMSNorm, TimestepEmbedder, gate, layer_norm, modulate
from .rope import apply_rope


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
    communication, the text is whole on every rank. Same projections as self-attention."""

    def forward(self, x: torch.Tensor, context: torch.Tensor) -> torch.Tensor:  # type: ignore[override]
        b, n, _ = x.shape
        t = context.shape[1]
        q = self.norm_q(self.q(x)).view(b, n, self.num_heads, self.head_dim)
        k = self.norm_k(self.k(context)).view(b, t, self.num_kv_heads, self.head_dim)
        v = self.v(context).view(b, t, self.num_kv_heads, self.head_dim)
        return self.o(sdpa(q, k, v).reshape(b, n, -1))


class WanBlock(nn.Module):
    def __init__(self, cfg: ModelConfig, device=None, dtype=None) -> None:
        super().__init__()
        self.eps = cfg.eps
        self.self_attn = WanSelfAttention(cfg, device, dtype)
        self.norm3 = nn.LayerNorm(cfg.hidden, eps=cfg.eps, device=device, dtype=dtype)
        self.cross_attn = WanCrossAttention(cfg, device, dtype)
        self.ffn = MLP(cfg.hidden, cfg.ffn_dim, device=device, dtype=dtype)
        self.modulation = nn.Parameter(torch.empty(1, 6, cfg.hidden, device=device, dtype=dtype))

    def forward(self, x, e, context, rope, attn: SequenceAttention):
        # e: [B, 6, D] time projection
        m = (self.modulation.float() + e.float()).to(x.dtype).unbind(1)
        shift_msa, scale_msa, gate_msa, shift_mlp, scale_mlp, gate_mlp = m
        y = self.self_attn(modulate(layer_norm(x, self.eps), shift_msa, scale_msa), rope, attn)
        x = x + gate(y, gate_msa)
        x = x + self.cross_attn(self.norm3(x), context)
        y = self.ffn(modulate(layer_norm(x, self.eps), shift_mlp, scale_mlp))
        return x + gate(y, gate_mlp)


class WanHead(nn.Module):
    def __init__(self, cfg: ModelConfig, device=None, dtype=None) -> None:
        super().__init__()
        self.eps = cfg.eps
        self.head = nn.Linear(cfg.hidden, cfg.patch_out, device=device, dtype=dtype)
        self.modulation = nn.Parameter(torch.empty(1, 2, cfg.hidden, device=device, dtype=dtype))

    def forward(self, x, e):
        shift, scale = (self.modulation.float() + e.float()[:, None]).to(x.dtype).unbind(1)
        return self.head(modulate(layer_norm(x, self.eps), shift, scale))


class WanDiT(DiTBase):
    def __init__(self, cfg: ModelConfig, device=None, dtype=None) -> None:
        super().__init__()
        if cfg.attention != "cross":
            raise ValueError("WanDiT needs attention 'cross'")
        self.cfg = cfg
        d = cfg.hidden
        self.patch_embedding = nn.Linear(cfg.patch_in, d, device=device, dtype=dtype)
        self.text_embedding = MLP(cfg.text_dim, d, d, device=device, dtype=dtype)
        self.time_embedding = TimestepEmbedder(cfg.freq_dim, d, device=device, dtype=dtype)
        self.time_projection = nn.Linear(d, 6 * d, device=device, dtype=dtype)
        self.blocks = nn.ModuleList(WanBlock(cfg, device, dtype) for _ in range(cfg.depth))
        self.head = WanHead(cfg, device, dtype)

    def _forward(self, tokens, timestep, cond, rope, attn):
        x = self.patch_embedding(tokens)
        e = self.time_embedding(timestep.to(x.device))
        e0 = self.time_projection(F.silu(e)).unflatten(1, (6, -1))
        context = self.text_embedding(cond)
        for block in self.blocks:
            x = block(x, e0, context, rope, attn)
        return self.head(x, e)
