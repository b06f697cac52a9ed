"""SkyReels-V2 on the one model path: video latents [B, C, F, H, W] (patch 1 x 2 x 2), umT5 text (whole on
every rank: cross-attention), diffusion forcing's one timestep per latent frame (the DF checkpoints;
the fullest call, from which the split plan is derived), CLIP image tokens where the config takes them
(``image_dim``: I2V), the fps index where it embeds one (``inject_sample_info``: DF 1.3B)."""

from __future__ import annotations

import torch

TINY = dict(patch_size=(1, 2, 2), num_attention_heads=4, attention_head_dim=8, in_channels=4, out_channels=4,
            text_dim=16, freq_dim=16, ffn_dim=32, num_layers=2, cross_attn_norm=True,
            qk_norm="rms_norm_across_heads", eps=1e-6, rope_max_seq_len=64)

#: forward arguments with one row per sample (CFG parallel splits the doubled batch by them)
BATCHED = ("hidden_states", "timestep", "encoder_hidden_states", "encoder_hidden_states_image", "fps")

#: CLIP image tokens an I2V model attends to (the tiny ones: fewer than the published 257)
IMAGE_TOKENS = 3


def inputs(config, *, batch, grid, text_len, generator, dtype=torch.float32):
    f, h, w = grid
    pt, ph, pw = config.get("patch_size", (1, 2, 2))
    out = dict(
        hidden_states=torch.randn(batch, config["in_channels"], f * pt, h * ph, w * pw, generator=generator).to(dtype),
        timestep=(torch.rand(batch, f, generator=generator) * 1000).to(dtype),
        encoder_hidden_states=torch.randn(batch, text_len, config["text_dim"], generator=generator).to(dtype),
        enable_diffusion_forcing=True, return_dict=False)
    if config.get("image_dim"):
        out["encoder_hidden_states_image"] = torch.randn(batch, IMAGE_TOKENS, config["image_dim"],
                                                         generator=generator).to(dtype)
    if config.get("inject_sample_info"):
        out["fps"] = [1] * batch  # the DF pipeline's fps index (0: 16 fps, 1: 24 fps)
    return out


def sampling(inputs, forward):
    """The flow-matching loop's call (runtime/models/inference.py ``denoise``: one timestep per sample)
    with diffusion forcing: every latent frame at the loop's noise level (the DF pipelines' synchronous
    schedule), as the per-frame timestep [B, frames] the class takes."""
    if not inputs.get("enable_diffusion_forcing"):
        return inputs, forward
    frames = int(inputs["timestep"].shape[1])

    def call(timestep, **kw):
        return forward(**kw, timestep=timestep[:, None].expand(-1, frames).contiguous())

    return {**inputs, "timestep": inputs["timestep"][:, 0].contiguous()}, call
