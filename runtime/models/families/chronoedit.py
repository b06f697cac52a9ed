"""ChronoEdit on the one model path: Wan2.1-style latents [B, C, F, H, W] (the input and edited images as a
video's first and last frames), umT5 text and CLIP image tokens whole on every rank (cross-attention)."""

from __future__ import annotations

import torch

from sporch.runtime.models.families import wan

TINY = dict(patch_size=(1, 2, 2), num_attention_heads=4, attention_head_dim=8, in_channels=8, out_channels=4,
            text_dim=16, freq_dim=16, ffn_dim=32, num_layers=2, cross_attn_norm=True, qk_norm="rms_norm_across_heads",
            eps=1e-6, image_dim=12, added_kv_proj_dim=32, rope_max_seq_len=64, rope_temporal_skip_len=8)
#: CLIP image tokens in the random jobs (the published image encoder gives 257)
IMAGE_TOKENS = 5

#: forward arguments with one row per sample (CFG parallel splits the doubled batch by them): Wan's
BATCHED = wan.BATCHED


def inputs(config, *, batch, grid, text_len, generator, dtype=torch.float32):
    """Wan's forward arguments (the same class layout) with ChronoEdit's image tokens."""
    return wan.inputs(config, batch=batch, grid=grid, text_len=text_len, generator=generator, dtype=dtype,
                      image_tokens=IMAGE_TOKENS)
