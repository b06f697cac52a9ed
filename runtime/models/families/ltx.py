"""LTX-Video on the one model path: one token per latent pixel (patch 1 x 1 x 1), T5 text."""

from __future__ import annotations

from typing import Any

import torch

from sporch.runtime.models.tiny_parts import randomize, t5_config, tiny_tokenizer, VOCAB

from sporch.runtime.models.build import random_diffusers
from sporch.runtime.models.families.calls import call_default

TINY = dict(in_channels=8, out_channels=8, patch_size=1, patch_size_t=1, num_attention_heads=4,
            attention_head_dim=8, cross_attention_dim=32, num_layers=2, caption_channels=16)

#: forward arguments with one row per sample (CFG parallel splits the doubled batch by them)
BATCHED = ("hidden_states", "encoder_hidden_states", "timestep", "encoder_attention_mask")


def inputs(config, *, batch, grid, text_len, generator, dtype=torch.float32):
    f, h, w = grid
    return dict(
        hidden_states=torch.randn(batch, f * h * w, config["in_channels"], generator=generator).to(dtype),
        encoder_hidden_states=torch.randn(batch, text_len, config["caption_channels"], generator=generator).to(dtype),
        timestep=(torch.rand(batch, generator=generator) * 1000).to(dtype),
        encoder_attention_mask=torch.ones(batch, text_len, dtype=dtype),
        num_frames=f, height=h, width=w, return_dict=False)


def encode(pipe, prompt: str, *, negative: str | None, cfg: bool, text_len: int, device) -> dict[str, Any]:
    """LTXPipeline's ``encode_prompt``: T5 padded to the call's default length, the mask dropping the
    padding's keys; the negative prompt's with CFG."""
    n = call_default(pipe, "max_sequence_length")
    pe, pm, npe, npm = pipe.encode_prompt(prompt, negative, cfg, num_videos_per_prompt=1, max_sequence_length=n,
                                          device=device)
    return {"prompt_embeds": pe, "prompt_attention_mask": pm, "negative_prompt_embeds": npe,
            "negative_prompt_attention_mask": npm}


def call_arguments(*, guidance_scale: float, cfg: bool, text_len: int) -> dict[str, Any]:
    """CFG batched into one call; a scale of 1 turns it off."""
    return {"guidance_scale": guidance_scale if cfg else 1.0}


def tiny_pipeline(seed: int = 0, config=None, **_):
    """LTXPipeline: a T5 encoder 16 wide (the transformer's caption_channels), AutoencoderKLLTXVideo
    (8 latent channels, 8 wide; patch 4 then three 2 x 2 x 2 scalings: 32 x 32 pixels and 8 frames
    per latent, as LTX-Video's; random latent statistics), the flow-matching Euler scheduler with
    LTX-Video's dynamic shift. The tokenizer pads every prompt to the pipeline's 128 tokens and its
    mask drops the padding's keys."""
    from diffusers import AutoencoderKLLTXVideo, FlowMatchEulerDiscreteScheduler, LTXPipeline
    from transformers import T5Config, T5EncoderModel

    config = dict(config or TINY)
    transformer = random_diffusers("LTXVideoTransformer3DModel", dict(config), seed=seed)
    t5 = randomize(T5EncoderModel(t5_config(T5Config, VOCAB, config["caption_channels"])), seed + 1)
    z = int(config["in_channels"])
    vae = randomize(AutoencoderKLLTXVideo(latent_channels=z, block_out_channels=(8, 8, 8, 8),
                                          decoder_block_out_channels=(8, 8, 8, 8), layers_per_block=(1, 1, 1, 1, 1),
                                          decoder_layers_per_block=(1, 1, 1, 1, 1)), seed + 2)
    g = torch.Generator().manual_seed(seed + 3)
    vae.latents_mean.copy_(0.2 * torch.randn(z, generator=g))
    vae.latents_std.copy_(1.0 + 0.5 * torch.rand(z, generator=g))
    scheduler = FlowMatchEulerDiscreteScheduler(use_dynamic_shifting=True, base_shift=0.95, max_shift=2.05,
                                                base_image_seq_len=1024, max_image_seq_len=4096, shift_terminal=0.1)
    return LTXPipeline(scheduler=scheduler, vae=vae, text_encoder=t5, tokenizer=tiny_tokenizer(128),
                       transformer=transformer)
