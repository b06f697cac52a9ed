"""CogVideoX on the generic path: latents [B, F, C, H, W], T5 text, 3-D RoPE tables as the pipeline
builds them (``get_3d_rotary_pos_embed``) when the config uses rotary embeddings."""

from __future__ import annotations

import torch

TINY = dict(num_attention_heads=4, attention_head_dim=16, in_channels=4, out_channels=4, time_embed_dim=8,
            text_embed_dim=16, num_layers=2, sample_width=8, sample_height=8, sample_frames=9, patch_size=2,
            temporal_compression_ratio=4, max_text_seq_length=8, use_rotary_positional_embeddings=True)

#: forward arguments with one row per sample (CFG parallel splits the doubled batch by them)
BATCHED = ("hidden_states", "encoder_hidden_states", "timestep")


def inputs(config, *, batch, grid, text_len, generator, dtype=torch.float32):
    from diffusers.models.embeddings import get_3d_rotary_pos_embed

    f, h, w = grid
    p = config.get("patch_size", 2)
    out = dict(
        hidden_states=torch.randn(batch, f, config["in_channels"], h * p, w * p, generator=generator).to(dtype),
        encoder_hidden_states=torch.randn(batch, text_len, config["text_embed_dim"], generator=generator).to(dtype),
        timestep=(torch.rand(batch, generator=generator) * 1000).to(dtype), return_dict=False)
    if config.get("use_rotary_positional_embeddings"):
        cos, sin = get_3d_rotary_pos_embed(embed_dim=config["attention_head_dim"], crops_coords=((0, 0), (h, w)),
                                           grid_size=(h, w), temporal_size=f)
        out["image_rotary_emb"] = (cos.to(dtype), sin.to(dtype))
    return out
