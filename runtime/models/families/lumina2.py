"""Lumina-Image 2.0 on the one model path: latents [B, C, H, W] (patch 2 x 2), Gemma text with its mask
(a shorter prompt's padding dropped: the joint sequence is padded per row), a timestep in [0, 1]."""

from __future__ import annotations

import torch

TINY = dict(sample_size=16, patch_size=2, in_channels=4, hidden_size=32, num_layers=2, num_refiner_layers=1,
            num_attention_heads=4, num_kv_heads=2, multiple_of=16, axes_dim_rope=(2, 2, 4), axes_lens=(32, 32, 32),
            cap_feat_dim=16)

#: forward arguments with one row per sample (CFG parallel splits the doubled batch by them)
BATCHED = ("hidden_states", "timestep", "encoder_hidden_states", "encoder_attention_mask")


def inputs(config, *, batch, grid, text_len, generator, dtype=torch.float32):
    f, h, w = grid
    p = config.get("patch_size", 2)
    return dict(
        hidden_states=torch.randn(batch, config["in_channels"], h * p, w * p, generator=generator).to(dtype),
        timestep=torch.rand(batch, generator=generator).to(dtype),
        encoder_hidden_states=torch.randn(batch, text_len, config["cap_feat_dim"], generator=generator).to(dtype),
        encoder_attention_mask=torch.ones(batch, text_len, dtype=torch.bool), return_dict=False)
