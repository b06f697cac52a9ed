"""Flux-style joint-attention DiT ("joint"): double-stream blocks (separate image/text
weights, one joint attention) followed by single-stream blocks (one fused stream over
text + image tokens). With the Flux.1 knobs (``rope_axes`` (16, 56, 56), ``pooled_dim``,
``guidance_embed``) and shapes this is Flux.1-dev / -schnell exactly
(tests/runtime/model/test_published.py compares it with diffusers' FluxTransformer2DModel); the
conditioning vector is time + embedded guidance + pooled text, as in Flux.

Sharded: image tokens are split over the sequence group, text tokens stay whole on every
rank and enter attention as the ``joint_*`` arguments of usp_attention. In single-stream
blocks the text part of the stream is likewise kept replicated (per-token maps are computed
on every rank, attention treats it as joint tokens). RoPE acts on image tokens only (text
sits at position 0, where a rotation is the identity).

Precision as in diffusers' Flux: the LayerNorms run on the bf16 activations (torch's kernel
accumulates in float32), the q/k RMSNorm is torch's (``F.rms_norm``), RoPE computes in float32;
the single-stream blocks run image + text as one stream (bench/flux_bytes.py counts the bytes)."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from .attention import SequenceAttention
from .base import DiTBase
from .condition import cond_text
from .config import ModelConfig
from .layers import MLP, NUM_TRAIN_TIMESTEPS, RMSNorm, TimestepEmbedder, gate, layer_norm, modulate
from .rope import apply_rope


class HeadNorm(nn.Module):
    """Per-head q/k RMSNorm over head_dim (or identity without qk_norm)."""

    def __init__(self, cfg: ModelConfig, device=None, dtype=None) -> None:
        super().__init__()
        self.q = RMSNorm(cfg.head_dim, cfg.eps, device, dtype) if cfg.qk_norm else nn.Identity()
        self.k = RMSNorm(cfg.head_dim, cfg.eps, device, dtype) if cfg.qk_norm else nn.Identity()


def split_qkv(qkv: torch.Tensor, cfg: ModelConfig):
    b, n, _ = qkv.shape
    hq, hk, d = cfg.num_heads * cfg.head_dim, cfg.num_kv_heads * cfg.head_dim, cfg.head_dim
    q, k, v = qkv.split([hq, hk, hk], dim=-1)
    return q.view(b, n, -1, d), k.view(b, n, -1, d), v.view(b, n, -1, d)


class StreamAttention(nn.Module):
    def __init__(self, cfg: ModelConfig, device=None, dtype=None) -> None:
        super().__init__()
        self.cfg = cfg
        qkv = (cfg.num_heads + 2 * cfg.num_kv_heads) * cfg.head_dim
        self.qkv = nn.Linear(cfg.hidden, qkv, device=device, dtype=dtype)
        self.norm = HeadNorm(cfg, device, dtype)
        self.proj = nn.Linear(cfg.hidden, cfg.hidden, device=device, dtype=dtype)

    def qkv_heads(self, x):
        q, k, v = split_qkv(self.qkv(x), self.cfg)
        return self.norm.q(q), self.norm.k(k), v


class DoubleStreamBlock(nn.Module):
    def __init__(self, cfg: ModelConfig, device=None, dtype=None) -> None:
        super().__init__()
        d = cfg.hidden
        self.eps = cfg.eps
        self.img_mod = nn.Linear(d, 6 * d, device=device, dtype=dtype)
        self.txt_mod = nn.Linear(d, 6 * d, device=device, dtype=dtype)
        self.img_attn = StreamAttention(cfg, device, dtype)
        self.txt_attn = StreamAttention(cfg, device, dtype)
        self.img_mlp = MLP(d, cfg.ffn_dim, device=device, dtype=dtype)
        self.txt_mlp = MLP(d, cfg.ffn_dim, device=device, dtype=dtype)

    def modulated_input(self, img, vec):
        """The image stream's modulated attention input (what TeaCache compares across steps)."""
        shift, scale = self.img_mod(F.silu(vec)).chunk(6, dim=-1)[:2]
        return modulate(layer_norm(img, self.eps, upcast=False), shift, scale)

    def forward(self, img, txt, vec, rope, attn: SequenceAttention):
        b, n, _ = img.shape
        t = txt.shape[1]
        im = self.img_mod(F.silu(vec)).chunk(6, dim=-1)
        tm = self.txt_mod(F.silu(vec)).chunk(6, dim=-1)
        iq, ik, iv = self.img_attn.qkv_heads(modulate(layer_norm(img, self.eps, upcast=False), im[0], im[1]))
        tq, tk, tv = self.txt_attn.qkv_heads(modulate(layer_norm(txt, self.eps, upcast=False), tm[0], tm[1]))
        iq, ik = apply_rope(iq, *rope), apply_rope(ik, *rope)
        img_o, txt_o = attn(iq, ik, iv, joint_q=tq, joint_k=tk, joint_v=tv)
        img = img + gate(self.img_attn.proj(img_o.reshape(b, n, -1)), im[2])
        img = img + gate(self.img_mlp(modulate(layer_norm(img, self.eps, upcast=False), im[3], im[4])), im[5])
        txt = txt + gate(self.txt_attn.proj(txt_o.reshape(b, t, -1)), tm[2])
        txt = txt + gate(self.txt_mlp(modulate(layer_norm(txt, self.eps, upcast=False), tm[3], tm[4])), tm[5])
        return img, txt


class SingleStreamBlock(nn.Module):
    """One stream, fused qkv+MLP input projection and fused output projection."""

    def __init__(self, cfg: ModelConfig, device=None, dtype=None) -> None:
        super().__init__()
        d = cfg.hidden
        self.cfg = cfg
        self.eps = cfg.eps
        self.qkv_dim = (cfg.num_heads + 2 * cfg.num_kv_heads) * cfg.head_dim
        self.modulation = nn.Linear(d, 3 * d, device=device, dtype=dtype)
        self.linear1 = nn.Linear(d, self.qkv_dim + cfg.ffn_dim, device=device, dtype=dtype)
        self.linear2 = nn.Linear(d + cfg.ffn_dim, d, device=device, dtype=dtype)
        self.norm = HeadNorm(cfg, device, dtype)

    def forward(self, img, txt, vec, rope, attn: SequenceAttention):
        n = img.shape[1]
        shift, scale, g = self.modulation(F.silu(vec)).chunk(3, dim=-1)
        # image and text tokens as one stream (as diffusers runs it): each weight is read once
        # per block, not once per stream; attention still takes the text as the joint tokens
        x = torch.cat([img, txt], 1)
        h = self.linear1(modulate(layer_norm(x, self.eps, upcast=False), shift, scale))
        qkv, mlp = h.split([self.qkv_dim, self.cfg.ffn_dim], dim=-1)
        q, k, v = split_qkv(qkv, self.cfg)
        q, k = self.norm.q(q), self.norm.k(k)
        iq, ik = apply_rope(q[:, :n], *rope), apply_rope(k[:, :n], *rope)
        img_o, txt_o = attn(iq, ik, v[:, :n], joint_q=q[:, n:], joint_k=k[:, n:], joint_v=v[:, n:])
        o = torch.cat([img_o, txt_o], 1).flatten(2)
        x = x + gate(self.linear2(torch.cat([o, F.gelu(mlp, approximate="tanh")], -1)), g)
        return x[:, :n], x[:, n:]


class FinalLayer(nn.Module):
    def __init__(self, cfg: ModelConfig, device=None, dtype=None) -> None:
        super().__init__()
        self.eps = cfg.eps
        self.adaLN = nn.Linear(cfg.hidden, 2 * cfg.hidden, device=device, dtype=dtype)
        self.linear = nn.Linear(cfg.hidden, cfg.patch_out, device=device, dtype=dtype)

    def forward(self, x, vec):
        shift, scale = self.adaLN(F.silu(vec)).chunk(2, dim=-1)
        return self.linear(modulate(layer_norm(x, self.eps, upcast=False), shift, scale))


class MMDiT(DiTBase):
    def __init__(self, cfg: ModelConfig, device=None, dtype=None) -> None:
        super().__init__()
        if cfg.attention != "joint":
            raise ValueError("MMDiT needs attention 'joint'")
        self.cfg = cfg
        d = cfg.hidden
        self.img_in = nn.Linear(cfg.patch_in, d, device=device, dtype=dtype)
        self.txt_in = nn.Linear(cfg.text_dim, d, device=device, dtype=dtype)
        # Flux computes its sinusoids in float32
        self.time_in = TimestepEmbedder(cfg.freq_dim, d, device=device, dtype=dtype, precision=torch.float32)
        if cfg.guidance_embed:
            self.guidance_in = TimestepEmbedder(cfg.freq_dim, d, device=device, dtype=dtype, precision=torch.float32)
        if cfg.pooled_dim:
            self.vector_in = MLP(cfg.pooled_dim, d, d, device=device, dtype=dtype, act="silu")
        self.double_blocks = nn.ModuleList(DoubleStreamBlock(cfg, device, dtype) for _ in range(cfg.depth))
        self.single_blocks = nn.ModuleList(SingleStreamBlock(cfg, device, dtype) for _ in range(cfg.single_depth))
        self.final_layer = FinalLayer(cfg, device, dtype)

    def _forward(self, tokens, timestep, cond, rope, attn, guidance=None, step=None):
        img = self.img_in(tokens)
        txt = self.txt_in(cond_text(cond))
        vec = self.time_in(timestep.to(img.device))
        if self.cfg.guidance_embed:
            if guidance is None:
                raise ValueError("this model embeds the guidance scale: pass guidance=")
            vec = vec + self.guidance_in(guidance * NUM_TRAIN_TIMESTEPS)
        if self.cfg.pooled_dim:
            vec = vec + self.vector_in(cond["pooled"])
        if step is not None:  # the text stream ends with the blocks: only the image stream is cached
            return self.final_layer(self._cached_blocks(img, txt, vec, rope, attn, step), vec)
        for block in self.double_blocks:
            img, txt = block(img, txt, vec, rope, attn)
        for block in self.single_blocks:
            img, txt = block(img, txt, vec, rope, attn)
        return self.final_layer(img, vec)

    def _cached_blocks(self, img, txt, vec, rope, attn, step):
        streams = {"txt": txt}  # the text stream after the first block, for the remaining ones

        def first(img):
            img, streams["txt"] = self.double_blocks[0](img, txt, vec, rope, attn)
            return img

        def rest(img):
            t = streams["txt"]
            for block in [*self.double_blocks[1:], *self.single_blocks]:
                img, t = block(img, t, vec, rope, attn)
            return img

        return step.run(img, first, rest, lambda img: self.double_blocks[0].modulated_input(img, vec))
