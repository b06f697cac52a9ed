"""Class-conditional DiT ("self"): self-attention only, conditioning = time + class label
through adaLN (six modulation vectors per block). Positions use the same 3D RoPE as the
other variants (instead of a fixed sin-cos table) so sequence shards need no table slicing."""

from __future__ import annotations

import torch.nn.functional as F
from torch import nn

from .attention import SequenceAttention
from .base import DiTBase
from .config import ModelConfig
from .layers import MLP, RMSNorm, TimestepEmbedder, gate, layer_norm, modulate
from .mmdit import FinalLayer
from .rope import apply_rope


class DiTBlock(nn.Module):
    def __init__(self, cfg: ModelConfig, device=None, dtype=None) -> None:
        super().__init__()
        d = cfg.hidden
        self.cfg = cfg
        self.eps = cfg.eps
        self.adaLN = nn.Linear(d, 6 * d, device=device, dtype=dtype)
        self.qkv = nn.Linear(d, (cfg.num_heads + 2 * cfg.num_kv_heads) * cfg.head_dim, device=device, dtype=dtype)
        self.norm_q = RMSNorm(cfg.head_dim, cfg.eps, device, dtype) if cfg.qk_norm else nn.Identity()
        self.norm_k = RMSNorm(cfg.head_dim, cfg.eps, device, dtype) if cfg.qk_norm else nn.Identity()
        self.proj = nn.Linear(d, d, device=device, dtype=dtype)
        self.mlp = MLP(d, cfg.ffn_dim, device=device, dtype=dtype)

    def forward(self, x, c, rope, attn: SequenceAttention):
        cfg = self.cfg
        b, n, _ = x.shape
        m = self.adaLN(F.silu(c)).chunk(6, dim=-1)
        h = self.qkv(modulate(layer_norm(x, self.eps), m[0], m[1]))
        hq, hk = cfg.num_heads * cfg.head_dim, cfg.num_kv_heads * cfg.head_dim
        q, k, v = h.split([hq, hk, hk], dim=-1)
        q = self.norm_q(q.view(b, n, -1, cfg.head_dim))
        k = self.norm_k(k.view(b, n, -1, cfg.head_dim))
        v = v.view(b, n, -1, cfg.head_dim)
        q, k = apply_rope(q, *rope), apply_rope(k, *rope)
        x = x + gate(self.proj(attn(q, k, v).reshape(b, n, -1)), m[2])
        return x + gate(self.mlp(modulate(layer_norm(x, self.eps), m[3], m[4])), m[5])


class ClassDiT(DiTBase):
    def __init__(self, cfg: ModelConfig, device=None, dtype=None) -> None:
        super().__init__()
        if cfg.attention != "self":
            raise ValueError("ClassDiT needs attention 'self'")
        self.cfg = cfg
        d = cfg.hidden
        self.x_embedder = nn.Linear(cfg.patch_in, d, device=device, dtype=dtype)
        self.t_embedder = TimestepEmbedder(cfg.freq_dim, d, device=device, dtype=dtype)
        self.y_embedder = nn.Embedding(cfg.num_classes + 1, d, device=device, dtype=dtype)  # last = null
        self.blocks = nn.ModuleList(DiTBlock(cfg, device, dtype) for _ in range(cfg.depth))
        self.final_layer = FinalLayer(cfg, device, dtype)

    def _forward(self, tokens, timestep, cond, rope, attn, guidance=None, step=None):
        if step is not None:
            raise ValueError("step caching (workload.cache) is for the Wan2.1 and Flux.1 models, not the class-label DiT")
        x = self.x_embedder(tokens)
        c = self.t_embedder(timestep.to(x.device)) + self.y_embedder(cond.to(x.device).long())
        for block in self.blocks:
            x = block(x, c, rope, attn)
        return self.final_layer(x, c)
