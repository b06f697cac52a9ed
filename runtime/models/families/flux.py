"""Flux.1 on the one path: packed latent tokens with (0, row, column) ids, T5 text + pooled CLIP, and
for generate ``FluxPipeline`` (guidance-distilled: one pass per step, the guidance an embedded input)."""

from __future__ import annotations

import math
from typing import Any, Mapping

import torch

from sporch.orchestrator.models.families.flux import TINY as TINY_PRESET
from sporch.runtime.models.tiny_parts import randomize, t5_config, tiny_tokenizer, VOCAB

from sporch.runtime.models.build import random_diffusers

#: the joint-attention test model's transformer config (the ``tiny-flux`` preset's)
TINY = dict(TINY_PRESET)

#: forward arguments with one row per sample (CFG parallel splits the doubled batch by them)
BATCHED = ("hidden_states", "encoder_hidden_states", "pooled_projections", "timestep", "guidance")
#: the transformer's timestep is the sigma (FluxPipeline passes ``t / 1000``)
TIMESTEP_SCALE = 1.0


def inputs(config, *, batch, grid, text_len, generator, dtype=torch.float32):
    f, h, w = grid
    ids = torch.zeros(h, w, 3)
    ids[..., 1] += torch.arange(h)[:, None]
    ids[..., 2] += torch.arange(w)[None, :]
    out = dict(
        hidden_states=torch.randn(batch, f * h * w, config["in_channels"], generator=generator).to(dtype),
        encoder_hidden_states=torch.randn(batch, text_len, config["joint_attention_dim"], generator=generator).to(dtype),
        pooled_projections=torch.randn(batch, config["pooled_projection_dim"], generator=generator).to(dtype),
        timestep=torch.rand(batch, generator=generator).to(dtype),
        img_ids=ids.reshape(h * w, 3).repeat(f, 1).to(dtype), txt_ids=torch.zeros(text_len, 3, dtype=dtype),
        return_dict=False)
    if config.get("guidance_embeds"):
        out["guidance"] = torch.full((batch,), 3.5, dtype=dtype)
    return out


def encode(pipe, prompt: str, *, negative: str | None, cfg: bool, text_len: int, device,
           image: Any = None) -> dict[str, Any]:
    """FluxPipeline's ``encode_prompt`` at the plan's text length: T5's hidden states and CLIP's
    pooled vector (no negative prompt: guidance-distilled)."""
    pe, ppe, _ = pipe.encode_prompt(prompt, prompt_2=None, device=device, max_sequence_length=text_len)
    return {"prompt_embeds": pe, "pooled_prompt_embeds": ppe}


def call_arguments(*, guidance_scale: float, cfg: bool, text_len: int) -> dict[str, Any]:
    """The scale is the transformer's embedded guidance input (flux.1-dev; schnell ignores it), one
    pass per step; the plan's text length."""
    return {"guidance_scale": guidance_scale, "max_sequence_length": text_len}


def tiny_pipeline(seed: int = 0, config: Mapping[str, Any] | None = None, *, text_len: int = 8,
                  vae_stride: tuple[int, int, int] = (1, 8, 8), **_):
    """A FluxPipeline whose transformer has ``config`` (default: the tiny-flux preset's): a CLIP
    text encoder whose pooled output is ``pooled_projection_dim`` wide, a T5 encoder
    ``joint_attention_dim`` wide, AutoencoderKL with ``in_channels / 4`` latent channels folding
    ``vae_stride`` pixels, FLUX.1's flow-matching Euler scheduler with its dynamic shift."""
    from diffusers import AutoencoderKL, FlowMatchEulerDiscreteScheduler, FluxPipeline
    from transformers import CLIPTextConfig, CLIPTextModel, T5Config, T5EncoderModel


    config = dict(config or TINY)
    transformer = random_diffusers("FluxTransformer2DModel", config, seed=seed)
    clip = randomize(CLIPTextModel(CLIPTextConfig(
        vocab_size=VOCAB, hidden_size=int(config["pooled_projection_dim"]), intermediate_size=64, num_hidden_layers=1,
        num_attention_heads=4, max_position_embeddings=77, pad_token_id=0, bos_token_id=1, eos_token_id=1)), seed + 1)
    t5 = randomize(T5EncoderModel(t5_config(T5Config, VOCAB, int(config["joint_attention_dim"]))), seed + 2)
    sh = int(vae_stride[1])
    blocks = [8 * 2 ** i for i in range(int(math.log2(sh)) + 1)]
    vae = randomize(AutoencoderKL(
        in_channels=3, out_channels=3, down_block_types=["DownEncoderBlock2D"] * len(blocks),
        up_block_types=["UpDecoderBlock2D"] * len(blocks), block_out_channels=blocks, layers_per_block=1,
        latent_channels=int(config["in_channels"]) // 4, norm_num_groups=4, sample_size=32, use_quant_conv=False,
        use_post_quant_conv=False, scaling_factor=0.3611, shift_factor=0.1159), seed + 3)
    scheduler = FlowMatchEulerDiscreteScheduler(shift=3.0, use_dynamic_shifting=True, base_shift=0.5, max_shift=1.15,
                                                base_image_seq_len=256, max_image_seq_len=4096)
    return FluxPipeline(scheduler=scheduler, vae=vae, text_encoder=clip, tokenizer=tiny_tokenizer(77),
                        text_encoder_2=t5, tokenizer_2=tiny_tokenizer(text_len), transformer=transformer)


def decode_latents(pipe, latents: torch.Tensor, *, height: int, width: int):
    """The pipeline's decode tail on its final packed latents (``sporch decode``): unpacked with the
    pipeline's own ``_unpack_latents``, scaled and shifted back, decoded, post-processed to float
    frames [B, 1, H, W, 3] in [0, 1]."""
    vae = pipe.vae
    x = pipe._unpack_latents(latents, height, width, pipe.vae_scale_factor)
    x = (x / vae.config.scaling_factor + vae.config.shift_factor).to(vae.dtype)
    image = vae.decode(x, return_dict=False)[0]
    return pipe.image_processor.postprocess(image, output_type="np")[:, None]
