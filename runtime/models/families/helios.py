"""Helios on the one model path: the chunk's latents [B, C, F, H, W] and the three history terms the
pipeline keeps (short, mid, long: the last frames patched 1x, 2x and 4x coarser), their tokens in
front of the chunk's; umT5 text whole on every rank (cross-attention, to the chunk's tokens only)."""

from __future__ import annotations

import torch

TINY = dict(patch_size=(1, 2, 2), num_attention_heads=4, attention_head_dim=8, in_channels=4, out_channels=4,
            text_dim=16, freq_dim=16, ffn_dim=32, num_layers=2, cross_attn_norm=True, qk_norm="rms_norm_across_heads",
            rope_dim=(4, 2, 2), has_multi_term_memory_patch=True, guidance_cross_attn=True,
            zero_history_timestep=True, is_amplify_history=False)
#: latent frames of the history terms in the random jobs: short (the prefix frame and 1 frame), mid 2, long 4
#: (HeliosPipeline's ``history_sizes`` [16, 2, 1] at a quarter of the long term)
HISTORY = {"short": 2, "mid": 2, "long": 4}

#: forward arguments with one row per sample (CFG parallel splits the doubled batch by them)
BATCHED = ("hidden_states", "timestep", "encoder_hidden_states", "indices_hidden_states",
           "indices_latents_history_short", "indices_latents_history_mid", "indices_latents_history_long",
           "latents_history_short", "latents_history_mid", "latents_history_long")


def inputs(config, *, batch, grid, text_len, generator, dtype=torch.float32):
    f, h, w = grid
    pt, ph, pw = config.get("patch_size", (1, 2, 2))
    c = config["in_channels"]
    shape = (h * ph, w * pw)
    out = dict(
        hidden_states=torch.randn(batch, c, f * pt, *shape, generator=generator).to(dtype),
        timestep=(torch.rand(batch, generator=generator) * 1000).to(dtype),
        encoder_hidden_states=torch.randn(batch, text_len, config["text_dim"], generator=generator).to(dtype),
        return_dict=False)
    if config.get("has_multi_term_memory_patch", True):
        n = sum(HISTORY.values())
        frames = torch.arange(n + f)  # long, mid, short history, then the chunk, as the pipeline orders them
        long, mid, short, chunk = frames.split([HISTORY["long"], HISTORY["mid"], HISTORY["short"], f])
        out.update(indices_hidden_states=chunk[None].expand(batch, -1),
                   **{f"indices_latents_history_{k}": v[None].expand(batch, -1)
                      for k, v in (("short", short), ("mid", mid), ("long", long))},
                   **{f"latents_history_{k}": torch.randn(batch, c, HISTORY[k], *shape, generator=generator).to(dtype)
                      for k in ("short", "mid", "long")})
    return out
