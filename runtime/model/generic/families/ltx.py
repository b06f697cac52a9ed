"""LTX-Video on the generic path: one token per latent pixel (patch 1 x 1 x 1), T5 text."""

from __future__ import annotations

import torch

TINY = dict(in_channels=8, out_channels=8, patch_size=1, patch_size_t=1, num_attention_heads=4,
            attention_head_dim=8, cross_attention_dim=32, num_layers=2, caption_channels=16)

#: forward arguments with one row per sample (CFG parallel splits the doubled batch by them)
BATCHED = ("hidden_states", "encoder_hidden_states", "timestep", "encoder_attention_mask")


def inputs(config, *, batch, grid, text_len, generator, dtype=torch.float32):
    f, h, w = grid
    return dict(
        hidden_states=torch.randn(batch, f * h * w, config["in_channels"], generator=generator).to(dtype),
        encoder_hidden_states=torch.randn(batch, text_len, config["caption_channels"], generator=generator).to(dtype),
        timestep=(torch.rand(batch, generator=generator) * 1000).to(dtype),
        encoder_attention_mask=torch.ones(batch, text_len, dtype=dtype),
        num_frames=f, height=h, width=w, return_dict=False)
