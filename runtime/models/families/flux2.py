"""FLUX.2 on the one model path: packed latent tokens (2 x 2 latent pixels per token) with (t, h, w, l)
position ids, Mistral / Qwen3 text states (three hidden layers stacked) with (0, 0, 0, l) ids, an
embedded guidance scale (FLUX.2 [dev]; FLUX.2 [klein] has none)."""

from __future__ import annotations

import torch

TINY = dict(patch_size=1, in_channels=16, out_channels=None, num_layers=1, num_single_layers=1,
            attention_head_dim=16, num_attention_heads=4, joint_attention_dim=24, timestep_guidance_channels=256,
            mlp_ratio=3.0, axes_dims_rope=(4, 4, 4, 4), guidance_embeds=True)

#: forward arguments with one row per sample (CFG parallel splits the doubled batch by them)
BATCHED = ("hidden_states", "encoder_hidden_states", "timestep", "img_ids", "txt_ids", "guidance")


def position_ids(batch: int, grid, text_len: int, dtype=torch.float32) -> tuple[torch.Tensor, torch.Tensor]:
    """(img_ids [B, f*h*w, 4], txt_ids [B, text_len, 4]): the (t, h, w, l) coordinates Flux2Pipeline
    gives its latent tokens (``_prepare_latent_ids``: t 0, the row and column, l 0) and its text
    tokens (``_prepare_text_ids``: l the token's place)."""
    f, h, w = grid
    img = torch.cartesian_prod(torch.arange(f), torch.arange(h), torch.arange(w), torch.arange(1))
    txt = torch.cartesian_prod(torch.arange(1), torch.arange(1), torch.arange(1), torch.arange(text_len))
    return img[None].expand(batch, -1, -1).to(dtype), txt[None].expand(batch, -1, -1).to(dtype)


def inputs(config, *, batch, grid, text_len, generator, dtype=torch.float32):
    f, h, w = grid
    img_ids, txt_ids = position_ids(batch, grid, text_len, dtype)
    out = dict(
        hidden_states=torch.randn(batch, f * h * w, config["in_channels"], generator=generator).to(dtype),
        encoder_hidden_states=torch.randn(batch, text_len, config["joint_attention_dim"], generator=generator).to(dtype),
        timestep=torch.rand(batch, generator=generator).to(dtype), img_ids=img_ids, txt_ids=txt_ids,
        return_dict=False)
    if config.get("guidance_embeds", True):
        out["guidance"] = torch.full((batch,), 4.0, dtype=dtype)
    return out
