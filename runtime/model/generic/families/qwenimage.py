"""Qwen-Image on the generic path: packed latent tokens (2 x 2 latent pixels per token)."""

from __future__ import annotations

import torch

TINY = dict(patch_size=2, in_channels=16, out_channels=4, num_layers=2, attention_head_dim=16,
            num_attention_heads=4, joint_attention_dim=24, axes_dims_rope=(4, 6, 6))

#: forward arguments with one row per sample (CFG parallel splits the doubled batch by them)
BATCHED = ("hidden_states", "encoder_hidden_states", "timestep", "img_shapes")


def inputs(config, *, batch, grid, text_len, generator, dtype=torch.float32):
    f, h, w = grid
    n = f * h * w
    return dict(
        hidden_states=torch.randn(batch, n, config["in_channels"], generator=generator).to(dtype),
        encoder_hidden_states=torch.randn(batch, text_len, config["joint_attention_dim"], generator=generator).to(dtype),
        timestep=torch.rand(batch, generator=generator).to(dtype),
        img_shapes=[[(f, h, w)]] * batch, return_dict=False)
