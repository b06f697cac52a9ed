"""CogVideoX on the one model path: latents [B, F, C, H, W], T5 text, 3-D RoPE tables as the pipeline
builds them (``get_3d_rotary_pos_embed``) when the config uses rotary embeddings."""

from __future__ import annotations

from typing import Any

import torch

from sporch.runtime.models.tiny_parts import randomize, t5_config, tiny_tokenizer, VOCAB

from sporch.runtime.models.build import random_diffusers

TINY = dict(num_attention_heads=4, attention_head_dim=16, in_channels=4, out_channels=4, time_embed_dim=8,
            text_embed_dim=16, num_layers=2, sample_width=8, sample_height=8, sample_frames=9, patch_size=2,
            temporal_compression_ratio=4, max_text_seq_length=8, use_rotary_positional_embeddings=True)

#: forward arguments with one row per sample (CFG parallel splits the doubled batch by them)
BATCHED = ("hidden_states", "encoder_hidden_states", "timestep")


def inputs(config, *, batch, grid, text_len, generator, dtype=torch.float32):
    from diffusers.models.embeddings import get_3d_rotary_pos_embed

    f, h, w = grid
    p = config.get("patch_size", 2)
    out = dict(
        hidden_states=torch.randn(batch, f, config["in_channels"], h * p, w * p, generator=generator).to(dtype),
        encoder_hidden_states=torch.randn(batch, text_len, config["text_embed_dim"], generator=generator).to(dtype),
        timestep=(torch.rand(batch, generator=generator) * 1000).to(dtype), return_dict=False)
    if config.get("use_rotary_positional_embeddings"):
        cos, sin = get_3d_rotary_pos_embed(embed_dim=config["attention_head_dim"], crops_coords=((0, 0), (h, w)),
                                           grid_size=(h, w), temporal_size=f)
        out["image_rotary_emb"] = (cos.to(dtype), sin.to(dtype))
    return out


def encode(pipe, prompt: str, *, negative: str | None, cfg: bool, text_len: int, device) -> dict[str, Any]:
    """CogVideoXPipeline's ``encode_prompt``: T5 padded to the family's ``text_len`` (the
    transformer's ``max_text_seq_length``, which every prompt fills)."""
    pe, npe = pipe.encode_prompt(prompt, negative, cfg, num_videos_per_prompt=1, max_sequence_length=text_len,
                                 device=device)
    return {"prompt_embeds": pe, "negative_prompt_embeds": npe}


def call_arguments(*, guidance_scale: float, cfg: bool, text_len: int) -> dict[str, Any]:
    """CFG batched into one call (a scale of 1 turns it off); the text length the prompts were encoded at."""
    return {"guidance_scale": guidance_scale if cfg else 1.0, "max_sequence_length": text_len}


def tiny_pipeline(seed: int = 0, config=None, **_):
    """CogVideoXPipeline: a T5 encoder 16 wide (the transformer's text_embed_dim), AutoencoderKLCogVideoX
    (4 latent channels, 8 x 8 pixels and 4 frames per latent), the CogVideoX DDIM scheduler
    (v-prediction, zero terminal SNR, as CogVideoX-5b's). Its sample size 96 x 80 sets ``enable_tiling``'s
    default tiles to half of it, 48 x 40 pixels (6 x 5 latents: strides 5 x 4 latents, 40 x 32 pixels, as
    the blend keeps; CogVideoX-5b's 240 x 360 keep them too), so a 64 x 48 image is decoded in 2 x 2 tiles."""
    from diffusers import AutoencoderKLCogVideoX, CogVideoXDDIMScheduler, CogVideoXPipeline
    from transformers import T5Config, T5EncoderModel

    config = dict(config or TINY)
    transformer = random_diffusers("CogVideoXTransformer3DModel", dict(config), seed=seed)
    t5 = randomize(T5EncoderModel(t5_config(T5Config, VOCAB, config["text_embed_dim"])), seed + 1)
    vae = randomize(AutoencoderKLCogVideoX(
        block_out_channels=(8, 8, 8, 8), latent_channels=config["in_channels"], layers_per_block=1, norm_num_groups=4,
        temporal_compression_ratio=config["temporal_compression_ratio"], sample_height=96, sample_width=80,
        scaling_factor=0.7), seed + 2)
    scheduler = CogVideoXDDIMScheduler(beta_schedule="scaled_linear", beta_start=0.00085, beta_end=0.012,
                                       prediction_type="v_prediction", rescale_betas_zero_snr=True,
                                       timestep_spacing="trailing", set_alpha_to_one=True, snr_shift_scale=1.0,
                                       clip_sample=False)
    return CogVideoXPipeline(tokenizer=tiny_tokenizer(int(config["max_text_seq_length"])), text_encoder=t5, vae=vae,
                             transformer=transformer, scheduler=scheduler)
