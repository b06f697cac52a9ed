"""CogView4 on the one model path: latents [B, C, H, W] (patch 2 x 2), GLM-4 text, SDXL-style size
conditions (original size, target size, crop corner: pixels); for generate ``CogView4Pipeline`` (true
CFG in two calls per step)."""

from __future__ import annotations

from typing import Any

import torch

from sporch.runtime.models.build import random_diffusers
from sporch.runtime.models.families.calls import call_default
from sporch.runtime.models.tiny_parts import VOCAB, randomize, tiny_tokenizer

TINY = dict(patch_size=2, in_channels=4, out_channels=4, num_layers=2, attention_head_dim=8, num_attention_heads=4,
            text_embed_dim=16, time_embed_dim=16, condition_dim=8, pos_embed_max_size=16, sample_size=16,
            rope_axes_dim=(8, 8))

#: forward arguments with one row per sample (CFG parallel splits the doubled batch by them)
BATCHED = ("hidden_states", "encoder_hidden_states", "timestep", "original_size", "target_size", "crop_coords")


def inputs(config, *, batch, grid, text_len, generator, dtype=torch.float32):
    f, h, w = grid
    p = config.get("patch_size", 2)
    size = torch.tensor([[h * p * 8.0, w * p * 8.0]] * batch, dtype=dtype)  # the image's pixels (8 per latent)
    return dict(
        hidden_states=torch.randn(batch, config["in_channels"], h * p, w * p, generator=generator).to(dtype),
        encoder_hidden_states=torch.randn(batch, text_len, config["text_embed_dim"], generator=generator).to(dtype),
        timestep=(torch.rand(batch, generator=generator) * 1000).to(dtype),
        original_size=size, target_size=size.clone(), crop_coords=torch.zeros(batch, 2, dtype=dtype),
        return_dict=False)


def encode(pipe, prompt: str, *, negative: str | None, cfg: bool, text_len: int, device) -> dict[str, Any]:
    """CogView4Pipeline's ``encode_prompt`` as its call runs it: GLM-4's second-to-last hidden states of
    the prompt padded (on the left) to a multiple of 16 tokens, at most the call's default length; with
    CFG the negative prompt's too ("" when unset, the call's default)."""
    n = call_default(pipe, "max_sequence_length")
    pe, npe = pipe.encode_prompt(prompt, negative or "", do_classifier_free_guidance=cfg, num_images_per_prompt=1,
                                 device=device, max_sequence_length=n)
    return {"prompt_embeds": pe, **({"negative_prompt_embeds": npe} if cfg else {})}


def call_arguments(*, guidance_scale: float, cfg: bool, text_len: int) -> dict[str, Any]:
    """True CFG in two calls per step ("cond", then "uncond"), which a scale of 1 turns off."""
    return {"guidance_scale": guidance_scale if cfg else 1.0}


def tiny_pipeline(seed: int = 0, config=None, **_):
    """CogView4Pipeline: a two-layer GLM text encoder (``GlmModel``, ``text_embed_dim`` wide: the
    pipeline reads its second-to-last hidden states), AutoencoderKL as CogView4-6B's (no quant convs,
    no mid-block attention, scaling 1, shift 0; ``in_channels`` latent channels, 8 x 8 pixels per
    latent, 32-pixel tiles), the flow-matching Euler scheduler with CogView4's linear dynamic shift
    (diffusers' scripts/convert_cogview4_to_diffusers.py)."""
    from diffusers import AutoencoderKL, CogView4Pipeline, FlowMatchEulerDiscreteScheduler
    from transformers import GlmConfig, GlmModel

    config = dict(config or TINY)
    transformer = random_diffusers("CogView4Transformer2DModel", dict(config), seed=seed)
    glm = randomize(GlmModel(GlmConfig(
        vocab_size=VOCAB, hidden_size=int(config["text_embed_dim"]), intermediate_size=32, num_hidden_layers=2,
        num_attention_heads=2, num_key_value_heads=1, head_dim=8, attention_bias=True, partial_rotary_factor=0.5,
        max_position_embeddings=2048, pad_token_id=0, eos_token_id=1, bos_token_id=1)), seed + 1)
    vae = randomize(AutoencoderKL(
        in_channels=3, out_channels=3, down_block_types=["DownEncoderBlock2D"] * 4,
        up_block_types=["UpDecoderBlock2D"] * 4, block_out_channels=[8, 8, 8, 8], layers_per_block=1,
        latent_channels=int(config["in_channels"]), norm_num_groups=4, sample_size=32, scaling_factor=1.0,
        shift_factor=0.0, use_quant_conv=False, use_post_quant_conv=False, mid_block_add_attention=False), seed + 2)
    scheduler = FlowMatchEulerDiscreteScheduler(base_shift=0.25, max_shift=0.75, base_image_seq_len=256,
                                                use_dynamic_shifting=True, time_shift_type="linear")
    return CogView4Pipeline(tokenizer=tiny_tokenizer(1024), text_encoder=glm, vae=vae, transformer=transformer,
                            scheduler=scheduler)
