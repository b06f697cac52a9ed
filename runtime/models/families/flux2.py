"""FLUX.2 on the one model path: packed latent tokens (2 x 2 latent pixels per token) with (t, h, w, l)
position ids, Mistral / Qwen3 text states (three hidden layers stacked) with (0, 0, 0, l) ids, an
embedded guidance scale (FLUX.2 [dev]; FLUX.2 [klein] has none); for generate ``Flux2Pipeline``
(guidance-distilled: one pass per step)."""

from __future__ import annotations

from typing import Any

import torch

from sporch.runtime.models.build import random_diffusers
from sporch.runtime.models.families.calls import call_default
from sporch.runtime.models.tiny_parts import VOCAB, randomize, tiny_tokenizer

TINY = dict(patch_size=1, in_channels=16, out_channels=None, num_layers=1, num_single_layers=1,
            attention_head_dim=16, num_attention_heads=4, joint_attention_dim=24, timestep_guidance_channels=256,
            mlp_ratio=3.0, axes_dims_rope=(4, 4, 4, 4), guidance_embeds=True)

#: forward arguments with one row per sample (CFG parallel splits the doubled batch by them)
BATCHED = ("hidden_states", "encoder_hidden_states", "timestep", "img_ids", "txt_ids", "guidance")


def position_ids(batch: int, grid, text_len: int, dtype=torch.float32) -> tuple[torch.Tensor, torch.Tensor]:
    """(img_ids [B, f*h*w, 4], txt_ids [B, text_len, 4]): the (t, h, w, l) coordinates Flux2Pipeline
    gives its latent tokens (``_prepare_latent_ids``: t 0, the row and column, l 0) and its text
    tokens (``_prepare_text_ids``: l the token's place)."""
    f, h, w = grid
    img = torch.cartesian_prod(torch.arange(f), torch.arange(h), torch.arange(w), torch.arange(1))
    txt = torch.cartesian_prod(torch.arange(1), torch.arange(1), torch.arange(1), torch.arange(text_len))
    return img[None].expand(batch, -1, -1).to(dtype), txt[None].expand(batch, -1, -1).to(dtype)


def inputs(config, *, batch, grid, text_len, generator, dtype=torch.float32):
    f, h, w = grid
    img_ids, txt_ids = position_ids(batch, grid, text_len, dtype)
    out = dict(
        hidden_states=torch.randn(batch, f * h * w, config["in_channels"], generator=generator).to(dtype),
        encoder_hidden_states=torch.randn(batch, text_len, config["joint_attention_dim"], generator=generator).to(dtype),
        timestep=torch.rand(batch, generator=generator).to(dtype), img_ids=img_ids, txt_ids=txt_ids,
        return_dict=False)
    if config.get("guidance_embeds", True):
        out["guidance"] = torch.full((batch,), 4.0, dtype=dtype)
    return out


#: the tiny text encoder's width: its three stacked hidden layers are the transformer's text width
TINY_TEXT_WIDTH = 8
#: a chat template for the tiny tokenizer: every message's text in turn (Flux2Pipeline formats a system
#: message and the prompt as a conversation and tokenizes it with the processor's template)
TINY_CHAT_TEMPLATE = ("{% for message in messages %}{% for part in message['content'] %}"
                      "{{ part['text'] }} {% endfor %}{% endfor %}")


def encode(pipe, prompt: str, *, negative: str | None, cfg: bool, text_len: int, device) -> dict[str, Any]:
    """Flux2Pipeline's ``encode_prompt`` at the plan's text length: the system message and the prompt
    as a conversation, the text encoder's hidden layers (10, 20, 30) stacked per token (no negative
    prompt: guidance-distilled)."""
    pe, _ = pipe.encode_prompt(prompt, device=device, num_images_per_prompt=1, max_sequence_length=text_len,
                               text_encoder_out_layers=call_default(pipe, "text_encoder_out_layers"))
    return {"prompt_embeds": pe}


def call_arguments(*, guidance_scale: float, cfg: bool, text_len: int) -> dict[str, Any]:
    """The scale is the transformer's embedded guidance input (FLUX.2 [dev]), one pass per step; the
    plan's text length."""
    return {"guidance_scale": guidance_scale, "max_sequence_length": text_len}


def tiny_pipeline(seed: int = 0, config=None, *, text_len: int = 512, **_):
    """Flux2Pipeline: a tiny Mistral 3 (``Mistral3ForConditionalGeneration``: 30 text layers 8 wide, so
    hidden layers 10, 20 and 30 stack to the transformer's ``joint_attention_dim``; a one-layer Pixtral
    vision tower the pipeline never calls), the word-level tokenizer with a chat template,
    AutoencoderKLFlux2 (``in_channels / 4`` latent channels, 8 x 8 pixels per latent, its batch-norm
    statistics randomised), the flow-matching Euler scheduler with FLUX's dynamic shift."""
    from diffusers import AutoencoderKLFlux2, FlowMatchEulerDiscreteScheduler, Flux2Pipeline
    from transformers import Mistral3Config, Mistral3ForConditionalGeneration

    config = dict(config or TINY)
    width = int(config["joint_attention_dim"]) // 3
    transformer = random_diffusers("Flux2Transformer2DModel", dict(config), seed=seed)
    text = Mistral3Config(
        text_config=dict(model_type="mistral", vocab_size=VOCAB, hidden_size=width, intermediate_size=16,
                         num_hidden_layers=30, num_attention_heads=2, num_key_value_heads=1, head_dim=width // 2,
                         max_position_embeddings=2048, pad_token_id=0, bos_token_id=1, eos_token_id=1),
        vision_config=dict(model_type="pixtral", hidden_size=8, intermediate_size=16, num_hidden_layers=1,
                           num_attention_heads=2, head_dim=4, image_size=16, patch_size=4),
        image_token_index=2, spatial_merge_size=1, vision_feature_layer=-1)
    encoder = randomize(Mistral3ForConditionalGeneration(text), seed + 1)
    vae = randomize(AutoencoderKLFlux2(
        in_channels=3, out_channels=3, down_block_types=["DownEncoderBlock2D"] * 4,
        up_block_types=["UpDecoderBlock2D"] * 4, block_out_channels=[8, 8, 8, 8], layers_per_block=1,
        latent_channels=int(config["in_channels"]) // 4, norm_num_groups=4, sample_size=32), seed + 2)
    with torch.no_grad():  # the latents' batch-norm statistics (buffers, which randomize leaves)
        g = torch.Generator().manual_seed(seed + 3)
        vae.bn.running_mean.copy_(0.1 * torch.randn(vae.bn.running_mean.shape, generator=g))
        vae.bn.running_var.copy_(1.0 + 0.2 * torch.rand(vae.bn.running_var.shape, generator=g))
    tokenizer = tiny_tokenizer(text_len)
    tokenizer.chat_template = TINY_CHAT_TEMPLATE
    scheduler = FlowMatchEulerDiscreteScheduler(shift=3.0, use_dynamic_shifting=True, base_shift=0.5, max_shift=1.15,
                                                base_image_seq_len=256, max_image_seq_len=4096)
    return Flux2Pipeline(scheduler=scheduler, vae=vae, text_encoder=encoder, tokenizer=tokenizer,
                         transformer=transformer)
