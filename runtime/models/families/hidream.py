"""HiDream-I1 on the generic path: latents [B, C, H, W] (patch 2 x 2; the class pads a non-square
grid to its ``max_resolution``: 49 tokens in ``TINY``, which 2 and 4 ranks cut unevenly), the T5 text, the Llama-3.1
hidden states of every layer ([layers, B, L, D], one layer read per block), the pooled CLIP text."""

from __future__ import annotations

import torch

TINY = dict(patch_size=2, in_channels=4, out_channels=4, num_layers=2, num_single_layers=2, attention_head_dim=8,
            num_attention_heads=4, caption_channels=[16, 12], text_emb_dim=10, num_routed_experts=3,
            num_activated_experts=2, axes_dims_rope=[4, 2, 2], max_resolution=[14, 14], llama_layers=[0, 2, 1, 2])

#: forward arguments with one row per sample (CFG parallel splits the doubled batch by them)
BATCHED = ("hidden_states", "timesteps", "encoder_hidden_states_t5", "encoder_hidden_states_llama3", "pooled_embeds")


def inputs(config, *, batch, grid, text_len, generator, dtype=torch.float32):
    f, h, w = grid
    p = config.get("patch_size", 2)
    t5, llama = config["caption_channels"]
    layers = max(config["llama_layers"]) + 1
    # the Llama states per layer, in a mapping of layer -> [B, L, D] (CFG parallel cuts each entry's rows)
    llama3 = {k: torch.randn(batch, text_len, llama, generator=generator).to(dtype) for k in range(layers)}
    return dict(
        hidden_states=torch.randn(batch, config["in_channels"], h * p, w * p, generator=generator).to(dtype),
        timesteps=(torch.rand(batch, generator=generator) * 1000).to(dtype),
        encoder_hidden_states_t5=torch.randn(batch, text_len, t5, generator=generator).to(dtype),
        encoder_hidden_states_llama3=llama3,
        pooled_embeds=torch.randn(batch, config["text_emb_dim"], generator=generator).to(dtype),
        return_dict=False)
