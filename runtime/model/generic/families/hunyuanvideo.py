"""HunyuanVideo on the generic path: latents [B, C, F, H, W], LLaMA text with its mask (all tokens
valid), pooled CLIP, embedded guidance."""

from __future__ import annotations

import torch

TINY = dict(in_channels=4, out_channels=4, num_attention_heads=4, attention_head_dim=10, num_layers=1,
            num_single_layers=1, num_refiner_layers=1, patch_size=1, patch_size_t=1, qk_norm="rms_norm",
            guidance_embeds=True, text_embed_dim=16, pooled_projection_dim=8, rope_axes_dim=(2, 4, 4))

#: forward arguments with one row per sample (CFG parallel splits the doubled batch by them)
BATCHED = ("hidden_states", "timestep", "encoder_hidden_states", "encoder_attention_mask", "pooled_projections",
           "guidance")


def inputs(config, *, batch, grid, text_len, generator, dtype=torch.float32):
    f, h, w = grid
    p, pt = config.get("patch_size", 2), config.get("patch_size_t", 1)
    return dict(
        hidden_states=torch.randn(batch, config["in_channels"], f * pt, h * p, w * p, generator=generator).to(dtype),
        timestep=(torch.rand(batch, generator=generator) * 1000).to(dtype),
        encoder_hidden_states=torch.randn(batch, text_len, config["text_embed_dim"], generator=generator).to(dtype),
        encoder_attention_mask=torch.ones(batch, text_len, dtype=dtype),
        pooled_projections=torch.randn(batch, config["pooled_projection_dim"], generator=generator).to(dtype),
        guidance=torch.full((batch,), 6.0, dtype=dtype) * 1000 if config.get("guidance_embeds") else None,
        return_dict=False)
