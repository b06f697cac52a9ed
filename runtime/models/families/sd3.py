"""SD3 / SD3.5 on the one model path: latents [B, C, H, W] (patch 2 x 2), text (CLIP + T5) and pooled CLIP."""

from __future__ import annotations

from typing import Any

import torch

from sporch.runtime.models.tiny_parts import autoencoder_kl, randomize, t5_config, tiny_tokenizer, VOCAB

from sporch.runtime.models.build import random_diffusers
from sporch.runtime.models.families.calls import call_default

TINY = dict(sample_size=16, patch_size=2, in_channels=4, num_layers=2, attention_head_dim=8, num_attention_heads=4,
            joint_attention_dim=16, caption_projection_dim=32, pooled_projection_dim=8, out_channels=4,
            pos_embed_max_size=16, qk_norm="rms_norm", dual_attention_layers=(0,))

#: forward arguments with one row per sample (CFG parallel splits the doubled batch by them)
BATCHED = ("hidden_states", "encoder_hidden_states", "pooled_projections", "timestep")


def inputs(config, *, batch, grid, text_len, generator, dtype=torch.float32):
    f, h, w = grid
    p = config.get("patch_size", 2)
    return dict(
        hidden_states=torch.randn(batch, config["in_channels"], h * p, w * p, generator=generator).to(dtype),
        encoder_hidden_states=torch.randn(batch, text_len, config["joint_attention_dim"], generator=generator).to(dtype),
        pooled_projections=torch.randn(batch, config["pooled_projection_dim"], generator=generator).to(dtype),
        timestep=(torch.rand(batch, generator=generator) * 1000).to(dtype), return_dict=False)


def encode(pipe, prompt: str, *, negative: str | None, cfg: bool, text_len: int, device) -> dict[str, Any]:
    """StableDiffusion3Pipeline's ``encode_prompt`` (77 CLIP + the call's default T5 tokens): the
    prompt's and (with CFG) the negative prompt's embeddings and pooled embeddings."""
    n = call_default(pipe, "max_sequence_length")
    pe, npe, ppe, nppe = pipe.encode_prompt(prompt=prompt, prompt_2=None, prompt_3=None, negative_prompt=negative,
                                            do_classifier_free_guidance=cfg, device=device, num_images_per_prompt=1,
                                            max_sequence_length=n)
    return {"prompt_embeds": pe, "pooled_prompt_embeds": ppe, "negative_prompt_embeds": npe,
            "negative_pooled_prompt_embeds": nppe}


def call_arguments(*, guidance_scale: float, cfg: bool, text_len: int) -> dict[str, Any]:
    """CFG batched into one call; a scale of 1 turns it off."""
    return {"guidance_scale": guidance_scale if cfg else 1.0}


def tiny_pipeline(seed: int = 0, config=None, **_):
    """StableDiffusion3Pipeline: two CLIP text encoders with projection (8 wide each, 4-wide pooled
    projections: 8 pooled together), a T5 encoder 16 wide (the transformer's joint_attention_dim),
    AutoencoderKL (4 latent channels, 8 x 8 pixels per latent), SD3's flow-matching Euler scheduler
    (shift 3)."""
    from diffusers import FlowMatchEulerDiscreteScheduler, StableDiffusion3Pipeline
    from transformers import CLIPTextConfig, CLIPTextModelWithProjection, T5Config, T5EncoderModel

    config = dict(config or TINY)
    transformer = random_diffusers("SD3Transformer2DModel", dict(config), seed=seed)

    def clip(s: int):
        return randomize(CLIPTextModelWithProjection(CLIPTextConfig(
            vocab_size=VOCAB, hidden_size=8, intermediate_size=16, num_hidden_layers=2, num_attention_heads=2,
            max_position_embeddings=77, projection_dim=config["pooled_projection_dim"] // 2, pad_token_id=0,
            bos_token_id=1, eos_token_id=1)), s)

    t5 = randomize(T5EncoderModel(t5_config(T5Config, VOCAB, config["joint_attention_dim"])), seed + 3)
    scheduler = FlowMatchEulerDiscreteScheduler(shift=3.0)
    return StableDiffusion3Pipeline(transformer=transformer, scheduler=scheduler,
                                    vae=autoencoder_kl(config["in_channels"], seed + 4),
                                    text_encoder=clip(seed + 1), tokenizer=tiny_tokenizer(77),
                                    text_encoder_2=clip(seed + 2), tokenizer_2=tiny_tokenizer(77),
                                    text_encoder_3=t5, tokenizer_3=tiny_tokenizer(256))
