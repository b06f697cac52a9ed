"""Chroma on the one model path: packed latent tokens with (0, row, column) ids, T5 text (no mask: the
pipeline's mask over token pairs is not what sequence-parallel attention takes)."""

from __future__ import annotations

import torch

TINY = dict(patch_size=1, in_channels=16, out_channels=4, num_layers=1, num_single_layers=1, attention_head_dim=8,
            num_attention_heads=4, joint_attention_dim=16, axes_dims_rope=(2, 2, 4), approximator_num_channels=8,
            approximator_hidden_dim=16, approximator_layers=1)

#: forward arguments with one row per sample (CFG parallel splits the doubled batch by them)
BATCHED = ("hidden_states", "encoder_hidden_states", "timestep")


def inputs(config, *, batch, grid, text_len, generator, dtype=torch.float32):
    f, h, w = grid
    ids = torch.zeros(h, w, 3)
    ids[..., 1] += torch.arange(h)[:, None]
    ids[..., 2] += torch.arange(w)[None, :]
    return dict(
        hidden_states=torch.randn(batch, f * h * w, config["in_channels"], generator=generator).to(dtype),
        encoder_hidden_states=torch.randn(batch, text_len, config["joint_attention_dim"], generator=generator).to(dtype),
        timestep=torch.rand(batch, generator=generator).to(dtype),
        img_ids=ids.reshape(h * w, 3).repeat(f, 1).to(dtype), txt_ids=torch.zeros(text_len, 3, dtype=dtype),
        return_dict=False)
