"""Wan2.1 VACE on the generic path: Wan's latents [B, C, F, H, W] and umT5 text (whole on every rank),
plus the control latents [B, vace_in_channels, F, H, W] (the reference video's latents and its mask,
as WanVACEPipeline prepares them) and a scale per VACE layer."""

from __future__ import annotations

import torch

from sporch.runtime.models.families import wan

TINY = {**wan.TINY, "vace_layers": [0, 1], "vace_in_channels": 8}

#: forward arguments with one row per sample (CFG parallel splits the doubled batch by them)
BATCHED = ("hidden_states", "timestep", "encoder_hidden_states", "control_hidden_states")


def inputs(config, *, batch, grid, text_len, generator, dtype=torch.float32):
    out = wan.inputs(config, batch=batch, grid=grid, text_len=text_len, generator=generator, dtype=dtype)
    f, h, w = grid
    pt, ph, pw = config.get("patch_size", (1, 2, 2))
    out["control_hidden_states"] = torch.randn(batch, config["vace_in_channels"], f * pt, h * ph, w * pw,
                                               generator=generator).to(dtype)
    layers = len(config["vace_layers"])
    out["control_hidden_states_scale"] = (0.5 + torch.rand(layers, generator=generator)).to(dtype)
    return out
