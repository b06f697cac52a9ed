"""HunyuanVideo on the one model path: latents [B, C, F, H, W], LLaMA text with its mask (all tokens
valid), pooled CLIP, embedded guidance."""

from __future__ import annotations

from typing import Any

import torch

from sporch.runtime.models.tiny_parts import randomize, tiny_tokenizer, VOCAB

from sporch.runtime.models.build import random_diffusers
from sporch.runtime.models.families.calls import call_default

TINY = dict(in_channels=4, out_channels=4, num_attention_heads=4, attention_head_dim=10, num_layers=1,
            num_single_layers=1, num_refiner_layers=1, patch_size=1, patch_size_t=1, qk_norm="rms_norm",
            guidance_embeds=True, text_embed_dim=16, pooled_projection_dim=8, rope_axes_dim=(2, 4, 4))

#: forward arguments with one row per sample (CFG parallel splits the doubled batch by them)
BATCHED = ("hidden_states", "timestep", "encoder_hidden_states", "encoder_attention_mask", "pooled_projections",
           "guidance")


def inputs(config, *, batch, grid, text_len, generator, dtype=torch.float32):
    f, h, w = grid
    p, pt = config.get("patch_size", 2), config.get("patch_size_t", 1)
    return dict(
        hidden_states=torch.randn(batch, config["in_channels"], f * pt, h * p, w * p, generator=generator).to(dtype),
        timestep=(torch.rand(batch, generator=generator) * 1000).to(dtype),
        encoder_hidden_states=torch.randn(batch, text_len, config["text_embed_dim"], generator=generator).to(dtype),
        encoder_attention_mask=torch.ones(batch, text_len, dtype=dtype),
        pooled_projections=torch.randn(batch, config["pooled_projection_dim"], generator=generator).to(dtype),
        guidance=torch.full((batch,), 6.0, dtype=dtype) * 1000 if config.get("guidance_embeds") else None,
        return_dict=False)


def encode(pipe, prompt: str, *, negative: str | None, cfg: bool, text_len: int, device) -> dict[str, Any]:
    """HunyuanVideoPipeline's ``encode_prompt`` (Llama after the pipeline's template, its mask
    dropping the padding, and CLIP's pooled vector); guidance-distilled: no negative prompt."""
    n = call_default(pipe, "max_sequence_length")
    pe, ppe, pm = pipe.encode_prompt(prompt=prompt, device=device, max_sequence_length=n)
    return {"prompt_embeds": pe, "pooled_prompt_embeds": ppe, "prompt_attention_mask": pm}


def call_arguments(*, guidance_scale: float, cfg: bool, text_len: int) -> dict[str, Any]:
    """Guidance-distilled: the scale is the transformer's embedded guidance input, one pass per step."""
    return {"guidance_scale": guidance_scale}


def tiny_pipeline(seed: int = 0, config=None, **_):
    """HunyuanVideoPipeline: a tiny Llama (two layers, 16 wide: the transformer's text_embed_dim; the
    pipeline takes its third-last hidden states), a CLIP text encoder whose pooled output is 8 wide
    (pooled_projection_dim), AutoencoderKLHunyuanVideo (4 latent channels, 8 x 8 pixels and 4
    frames per latent), the flow-matching Euler scheduler with HunyuanVideo's shift 7. The Llama
    tokenizer pads every prompt (after the pipeline's template) to 256 tokens and its mask drops the
    padding's keys."""
    from diffusers import AutoencoderKLHunyuanVideo, FlowMatchEulerDiscreteScheduler, HunyuanVideoPipeline
    from transformers import CLIPTextConfig, CLIPTextModel, LlamaConfig, LlamaModel

    config = dict(config or TINY)
    transformer = random_diffusers("HunyuanVideoTransformer3DModel", dict(config), seed=seed)
    llama = randomize(LlamaModel(LlamaConfig(
        vocab_size=VOCAB, hidden_size=config["text_embed_dim"], intermediate_size=32, num_hidden_layers=2,
        num_attention_heads=2, num_key_value_heads=1, max_position_embeddings=512, pad_token_id=0)), seed + 1)
    clip = randomize(CLIPTextModel(CLIPTextConfig(
        vocab_size=VOCAB, hidden_size=config["pooled_projection_dim"], intermediate_size=16, num_hidden_layers=1,
        num_attention_heads=2, max_position_embeddings=77, pad_token_id=0, bos_token_id=1, eos_token_id=1)), seed + 2)
    vae = randomize(AutoencoderKLHunyuanVideo(latent_channels=config["in_channels"], block_out_channels=(8, 8, 8, 8),
                                              layers_per_block=1, norm_num_groups=4), seed + 3)
    return HunyuanVideoPipeline(text_encoder=llama, tokenizer=tiny_tokenizer(512), transformer=transformer, vae=vae,
                                scheduler=FlowMatchEulerDiscreteScheduler(shift=7.0), text_encoder_2=clip,
                                tokenizer_2=tiny_tokenizer(77))
