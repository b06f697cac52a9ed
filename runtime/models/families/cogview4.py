"""CogView4 on the one model path: latents [B, C, H, W] (patch 2 x 2), GLM-4 text, SDXL-style size
conditions (original size, target size, crop corner: pixels)."""

from __future__ import annotations

import torch

TINY = dict(patch_size=2, in_channels=4, out_channels=4, num_layers=2, attention_head_dim=8, num_attention_heads=4,
            text_embed_dim=16, time_embed_dim=16, condition_dim=8, pos_embed_max_size=16, sample_size=16,
            rope_axes_dim=(8, 8))

#: forward arguments with one row per sample (CFG parallel splits the doubled batch by them)
BATCHED = ("hidden_states", "encoder_hidden_states", "timestep", "original_size", "target_size", "crop_coords")


def inputs(config, *, batch, grid, text_len, generator, dtype=torch.float32):
    f, h, w = grid
    p = config.get("patch_size", 2)
    size = torch.tensor([[h * p * 8.0, w * p * 8.0]] * batch, dtype=dtype)  # the image's pixels (8 per latent)
    return dict(
        hidden_states=torch.randn(batch, config["in_channels"], h * p, w * p, generator=generator).to(dtype),
        encoder_hidden_states=torch.randn(batch, text_len, config["text_embed_dim"], generator=generator).to(dtype),
        timestep=(torch.rand(batch, generator=generator) * 1000).to(dtype),
        original_size=size, target_size=size.clone(), crop_coords=torch.zeros(batch, 2, dtype=dtype),
        return_dict=False)
