"""Qwen-Image on the one model path: packed latent tokens (2 x 2 latent pixels per token)."""

from __future__ import annotations

from typing import Any

import torch

from sporch.runtime.models.tiny_parts import randomize, tiny_tokenizer, VOCAB

from sporch.runtime.models.build import random_diffusers
from sporch.runtime.models.families.calls import call_default

TINY = dict(patch_size=2, in_channels=16, out_channels=4, num_layers=2, attention_head_dim=16,
            num_attention_heads=4, joint_attention_dim=24, axes_dims_rope=(4, 6, 6))

#: forward arguments with one row per sample (CFG parallel splits the doubled batch by them)
BATCHED = ("hidden_states", "encoder_hidden_states", "timestep", "img_shapes")


def inputs(config, *, batch, grid, text_len, generator, dtype=torch.float32):
    f, h, w = grid
    n = f * h * w
    return dict(
        hidden_states=torch.randn(batch, n, config["in_channels"], generator=generator).to(dtype),
        encoder_hidden_states=torch.randn(batch, text_len, config["joint_attention_dim"], generator=generator).to(dtype),
        timestep=torch.rand(batch, generator=generator).to(dtype),
        img_shapes=[[(f, h, w)]] * batch, return_dict=False)


def encode(pipe, prompt: str, *, negative: str | None, cfg: bool, text_len: int, device) -> dict[str, Any]:
    """QwenImagePipeline's ``encode_prompt`` at its call's default length (the prompt's own, at most
    1024 tokens), the negative prompt ("" when unset) too with CFG: the call's embeddings and masks."""
    n = call_default(pipe, "max_sequence_length")
    pe, pm = pipe.encode_prompt(prompt=prompt, device=device, num_images_per_prompt=1, max_sequence_length=n)
    out = {"prompt_embeds": pe, "prompt_embeds_mask": pm}
    if cfg:
        npe, npm = pipe.encode_prompt(prompt=negative or "", device=device, num_images_per_prompt=1,
                                      max_sequence_length=n)
        out.update(negative_prompt_embeds=npe, negative_prompt_embeds_mask=npm)
    return out


def call_arguments(*, guidance_scale: float, cfg: bool, text_len: int) -> dict[str, Any]:
    """True CFG: the pipeline runs the second pass when it is given negative embeddings and a scale > 1."""
    return {"true_cfg_scale": guidance_scale if cfg else 1.0}


def tiny_pipeline(seed: int = 0, config=None, **_):
    """QwenImagePipeline: a tiny Qwen2.5-VL (one text layer, 24 wide; a one-block vision tower the
    pipeline never calls), AutoencoderKLQwenImage (z 4, 8 x 8 pixels per latent), the flow-matching
    Euler scheduler with Qwen-Image's dynamic shift."""
    from diffusers import AutoencoderKLQwenImage, FlowMatchEulerDiscreteScheduler, QwenImagePipeline
    from transformers import Qwen2_5_VLConfig, Qwen2_5_VLForConditionalGeneration

    config = {**(config or TINY), "joint_attention_dim": 24}
    transformer = random_diffusers("QwenImageTransformer2DModel", config, seed=seed)
    z = int(config["out_channels"])
    text = Qwen2_5_VLConfig(
        text_config=dict(vocab_size=VOCAB, hidden_size=24, intermediate_size=48, num_hidden_layers=1,
                         num_attention_heads=2, num_key_value_heads=1, max_position_embeddings=2048,
                         rope_scaling={"type": "mrope", "mrope_section": [2, 2, 2]}, pad_token_id=0),
        vision_config=dict(depth=1, hidden_size=16, intermediate_size=32, num_heads=2, out_hidden_size=24,
                           patch_size=2, spatial_merge_size=1, temporal_patch_size=1, fullatt_block_indexes=[0]),
        vocab_size=VOCAB, pad_token_id=0)
    encoder = randomize(Qwen2_5_VLForConditionalGeneration(text), seed + 1)
    g = torch.Generator().manual_seed(seed + 2)
    vae = AutoencoderKLQwenImage(base_dim=8, z_dim=z, dim_mult=[1, 1, 1, 1], num_res_blocks=1,
                                 temperal_downsample=[False, False, False],
                                 latents_mean=(0.2 * torch.randn(z, generator=g)).tolist(),
                                 latents_std=(1.0 + 0.5 * torch.rand(z, generator=g)).tolist()).eval()
    scheduler = FlowMatchEulerDiscreteScheduler(shift=1.0, use_dynamic_shifting=True, base_shift=0.5, max_shift=0.9,
                                                base_image_seq_len=256, max_image_seq_len=8192,
                                                time_shift_type="exponential")
    return QwenImagePipeline(scheduler=scheduler, vae=vae, text_encoder=encoder, tokenizer=tiny_tokenizer(1024),
                             transformer=transformer)
