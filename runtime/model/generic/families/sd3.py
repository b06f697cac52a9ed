"""SD3 / SD3.5 on the generic path: latents [B, C, H, W] (patch 2 x 2), text (CLIP + T5) and pooled CLIP."""

from __future__ import annotations

import torch

TINY = dict(sample_size=16, patch_size=2, in_channels=4, num_layers=2, attention_head_dim=8, num_attention_heads=4,
            joint_attention_dim=16, caption_projection_dim=32, pooled_projection_dim=8, out_channels=4,
            pos_embed_max_size=16, qk_norm="rms_norm", dual_attention_layers=(0,))

#: forward arguments with one row per sample (CFG parallel splits the doubled batch by them)
BATCHED = ("hidden_states", "encoder_hidden_states", "pooled_projections", "timestep")


def inputs(config, *, batch, grid, text_len, generator, dtype=torch.float32):
    f, h, w = grid
    p = config.get("patch_size", 2)
    return dict(
        hidden_states=torch.randn(batch, config["in_channels"], h * p, w * p, generator=generator).to(dtype),
        encoder_hidden_states=torch.randn(batch, text_len, config["joint_attention_dim"], generator=generator).to(dtype),
        pooled_projections=torch.randn(batch, config["pooled_projection_dim"], generator=generator).to(dtype),
        timestep=(torch.rand(batch, generator=generator) * 1000).to(dtype), return_dict=False)
