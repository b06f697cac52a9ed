"""Lumina-Image 2.0 on the one model path: latents [B, C, H, W] (patch 2 x 2), Gemma text with its mask
(a shorter prompt's padding dropped: the joint sequence is padded per row), a timestep in [0, 1]; for
generate ``Lumina2Pipeline`` (true CFG in two calls per step)."""

from __future__ import annotations

from typing import Any

import torch

from sporch.runtime.models.build import random_diffusers
from sporch.runtime.models.families.calls import call_default
from sporch.runtime.models.tiny_parts import VOCAB, randomize, tiny_tokenizer

TINY = dict(sample_size=16, patch_size=2, in_channels=4, hidden_size=32, num_layers=2, num_refiner_layers=1,
            num_attention_heads=4, num_kv_heads=2, multiple_of=16, axes_dim_rope=(2, 2, 4), axes_lens=(32, 32, 32),
            cap_feat_dim=16)

#: forward arguments with one row per sample (CFG parallel splits the doubled batch by them)
BATCHED = ("hidden_states", "timestep", "encoder_hidden_states", "encoder_attention_mask")


def inputs(config, *, batch, grid, text_len, generator, dtype=torch.float32):
    f, h, w = grid
    p = config.get("patch_size", 2)
    return dict(
        hidden_states=torch.randn(batch, config["in_channels"], h * p, w * p, generator=generator).to(dtype),
        timestep=torch.rand(batch, generator=generator).to(dtype),
        encoder_hidden_states=torch.randn(batch, text_len, config["cap_feat_dim"], generator=generator).to(dtype),
        encoder_attention_mask=torch.ones(batch, text_len, dtype=torch.bool), return_dict=False)


def encode(pipe, prompt: str, *, negative: str | None, cfg: bool, text_len: int, device) -> dict[str, Any]:
    """Lumina2Pipeline's ``encode_prompt`` as its call runs it: the pipeline's system prompt before the
    prompt, Gemma's second-to-last hidden states padded to the call's default length with the mask of
    the kept tokens; with CFG the negative prompt's too ("" when unset, the call's default)."""
    n = call_default(pipe, "max_sequence_length")
    pe, pm, npe, npm = pipe.encode_prompt(prompt, cfg, negative_prompt=negative or "", num_images_per_prompt=1,
                                          device=device, max_sequence_length=n)
    out = {"prompt_embeds": pe, "prompt_attention_mask": pm}
    if cfg:
        out.update(negative_prompt_embeds=npe, negative_prompt_attention_mask=npm)
    return out


def call_arguments(*, guidance_scale: float, cfg: bool, text_len: int) -> dict[str, Any]:
    """True CFG in two calls per step (with the pipeline's default normalisation and no truncation),
    which a scale of 1 turns off."""
    return {"guidance_scale": guidance_scale if cfg else 1.0}


def tiny_pipeline(seed: int = 0, config=None, **_):
    """Lumina2Pipeline: a two-layer Gemma-2 text encoder (``Gemma2Model``, ``cap_feat_dim`` wide: the
    pipeline reads its second-to-last hidden states), FLUX.1's AutoencoderKL layout (no quant convs,
    scaling 0.3611, shift 0.1159; ``in_channels`` latent channels, 8 x 8 pixels per latent, 32-pixel
    tiles), the flow-matching Euler scheduler with a static shift of 6 (Lumina-Image 2.0's). The
    transformer's RoPE table is as long as the published one's (``axes_lens`` 300, 512, 512), so the
    pipeline's system prompt and the prompt fit its text positions."""
    from diffusers import AutoencoderKL, FlowMatchEulerDiscreteScheduler, Lumina2Pipeline
    from transformers import Gemma2Config, Gemma2Model

    config = {**dict(config or TINY), "axes_lens": (300, 512, 512)} if config is None else dict(config)
    transformer = random_diffusers("Lumina2Transformer2DModel", dict(config), seed=seed)
    gemma = randomize(Gemma2Model(Gemma2Config(
        vocab_size=VOCAB, hidden_size=int(config["cap_feat_dim"]), intermediate_size=32, num_hidden_layers=2,
        num_attention_heads=2, num_key_value_heads=1, head_dim=8, max_position_embeddings=512, pad_token_id=0,
        eos_token_id=1, bos_token_id=1)), seed + 1)
    vae = randomize(AutoencoderKL(
        in_channels=3, out_channels=3, down_block_types=["DownEncoderBlock2D"] * 4,
        up_block_types=["UpDecoderBlock2D"] * 4, block_out_channels=[8, 8, 8, 8], layers_per_block=1,
        latent_channels=int(config["in_channels"]), norm_num_groups=4, sample_size=32, scaling_factor=0.3611,
        shift_factor=0.1159, use_quant_conv=False, use_post_quant_conv=False), seed + 2)
    return Lumina2Pipeline(transformer=transformer, scheduler=FlowMatchEulerDiscreteScheduler(shift=6.0), vae=vae,
                           text_encoder=gemma, tokenizer=tiny_tokenizer(256))
