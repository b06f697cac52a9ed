"""Cosmos on the generic path: video latents [B, C, F, H, W] (patch 1 x 2 x 2), T5 text, the frame
rate; a Video2World config (more input channels than output ones) takes its conditioning-mask
channel and one timestep per latent frame ([B, 1, F, 1, 1]: per-token modulation), as
Cosmos2VideoToWorldPipeline calls it. ``TINY`` leaves out the published configs' padding-mask
channel (``concat_padding_mask``: diffusers resizes it with torchvision)."""

from __future__ import annotations

import torch

TINY = dict(in_channels=5, out_channels=4, num_attention_heads=4, attention_head_dim=16, num_layers=2,
            mlp_ratio=2.0, text_embed_dim=16, adaln_lora_dim=8, max_size=(16, 32, 32), patch_size=(1, 2, 2),
            rope_scale=(2.0, 1.0, 1.0), concat_padding_mask=False, extra_pos_embed_type="learnable")

#: forward arguments with one row per sample (CFG parallel splits the doubled batch by them)
BATCHED = ("hidden_states", "timestep", "encoder_hidden_states", "condition_mask")


def inputs(config, *, batch, grid, text_len, generator, dtype=torch.float32):
    f, h, w = grid
    pt, ph, pw = config.get("patch_size", (1, 2, 2))
    c = config.get("out_channels", 16)
    cond = config.get("in_channels", 16) - c
    out = dict(hidden_states=torch.randn(batch, c, f * pt, h * ph, w * pw, generator=generator).to(dtype),
               encoder_hidden_states=torch.randn(batch, text_len, config["text_embed_dim"], generator=generator).to(dtype),
               fps=24, return_dict=False)
    if cond > 0:  # Video2World: the first latent frame conditions, one timestep per latent frame
        mask = torch.zeros(batch, cond, f * pt, h * ph, w * pw, dtype=dtype)
        mask[:, :, 0] = 1
        out["condition_mask"] = mask
        out["timestep"] = torch.rand(batch, 1, f * pt, 1, 1, generator=generator).to(dtype)
    else:
        out["timestep"] = torch.rand(batch, generator=generator).to(dtype)
    return out
