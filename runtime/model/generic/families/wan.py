"""Wan on the generic path: latents [B, C, F, H, W], umT5 text (whole on every rank)."""

from __future__ import annotations

import torch

TINY = dict(patch_size=(1, 2, 2), num_attention_heads=4, attention_head_dim=8, in_channels=4, out_channels=4,
            text_dim=16, freq_dim=16, ffn_dim=32, num_layers=2, cross_attn_norm=True, qk_norm="rms_norm_across_heads",
            eps=1e-6, rope_max_seq_len=64)

#: forward arguments with one row per sample (CFG parallel splits the doubled batch by them)
BATCHED = ("hidden_states", "timestep", "encoder_hidden_states")


def inputs(config, *, batch, grid, text_len, generator, dtype=torch.float32):
    f, h, w = grid
    pt, ph, pw = config.get("patch_size", (1, 2, 2))
    return dict(
        hidden_states=torch.randn(batch, config["in_channels"], f * pt, h * ph, w * pw, generator=generator).to(dtype),
        timestep=(torch.rand(batch, generator=generator) * 1000).to(dtype),
        encoder_hidden_states=torch.randn(batch, text_len, config["text_dim"], generator=generator).to(dtype),
        return_dict=False)
