"""Z-Image on the one model path: its forward takes lists (one latent [C, F, H, W] and one caption
[tokens, width] per sample, as ZImagePipeline calls it), a timestep in [0, 1] per sample; for generate
``ZImagePipeline`` (both CFG passes in one call: [prompt, negative] list entries)."""

from __future__ import annotations

from typing import Any, Mapping

import torch

from sporch.runtime.models.build import random_diffusers
from sporch.runtime.models.tiny_parts import VOCAB, randomize, tiny_tokenizer

TINY = dict(all_patch_size=(2,), all_f_patch_size=(1,), in_channels=4, dim=32, n_layers=2, n_refiner_layers=1,
            n_heads=4, n_kv_heads=4, norm_eps=1e-5, qk_norm=True, cap_feat_dim=16, rope_theta=256.0, t_scale=1000.0,
            axes_dims=[2, 2, 4], axes_lens=[128, 32, 32])

#: forward arguments with one row per sample (CFG parallel splits the doubled batch by them: the lists too)
BATCHED = ("x", "t", "cap_feats")


def inputs(config, *, batch, grid, text_len, generator, dtype=torch.float32):
    f, h, w = grid
    p = list(config.get("all_patch_size", [2]))[0]
    pf = list(config.get("all_f_patch_size", [1]))[0]
    c = config["in_channels"]
    return dict(x=[torch.randn(c, f * pf, h * p, w * p, generator=generator).to(dtype) for _ in range(batch)],
                t=torch.rand(batch, generator=generator).to(dtype),
                cap_feats=[torch.randn(text_len, config["cap_feat_dim"], generator=generator).to(dtype)
                           for _ in range(batch)],
                return_dict=False)


#: the loop's timestep is the sigma itself (ZImagePipeline passes the class ``1 - sigma``: :func:`sampling`)
TIMESTEP_SCALE = 1.0


def sampling(inputs, forward):
    """The flow-matching loop's call (runtime/models/inference.py ``denoise``: latents as
    ``hidden_states`` [B, C, F, H, W], ``timestep`` the sigma) made as ZImagePipeline makes it: one
    latent per sample in ``x``, the class's time ``t = 1 - sigma``, its prediction negated (the class
    predicts ``x0 - noise``)."""
    rest = {k: v for k, v in inputs.items() if k not in ("x", "t")}
    loop_inputs = {**rest, "hidden_states": torch.stack(list(inputs["x"])), "timestep": inputs["t"]}

    def call(hidden_states, timestep, **kw):
        out = forward(**kw, x=list(hidden_states.unbind(0)), t=1.0 - timestep)
        return -(torch.stack(list(out)) if isinstance(out, (list, tuple)) else out)

    return loop_inputs, call


def encode(pipe, prompt: str, *, negative: str | None, cfg: bool, text_len: int, device) -> dict[str, Any]:
    """ZImagePipeline's ``encode_prompt`` as its call runs it: the prompt in the tokenizer's chat template,
    Qwen3's second-to-last hidden states of its tokens only (a list, one entry per prompt, at most the
    plan's text length); with CFG the negative prompt's too ("" when unset, the call's default)."""
    pe, npe = pipe.encode_prompt(prompt, device=device, do_classifier_free_guidance=cfg,
                                 negative_prompt=negative or "", max_sequence_length=text_len)
    return {"prompt_embeds": pe, **({"negative_prompt_embeds": npe} if cfg else {})}


def call_arguments(*, guidance_scale: float, cfg: bool, text_len: int) -> dict[str, Any]:
    """Both CFG passes in one batched call; the pipeline's scale counts from 0 (``pos + g (pos - neg)``),
    so CFG off is 0 (the planner refuses a scale in (0, 1]: ``Family.cfg_from_zero``)."""
    return {"guidance_scale": guidance_scale if cfg else 0.0, "max_sequence_length": text_len}


#: the tiny tokenizer's chat template: the messages' text as it is (the pipeline wraps the prompt in one
#: user message; ``enable_thinking`` is a template variable this one does not read)
TINY_CHAT_TEMPLATE = "{% for message in messages %}{{ message['content'] }} {% endfor %}"


def tiny_pipeline(seed: int = 0, config: Mapping[str, Any] | None = None, *, text_len: int = 512, **_):
    """ZImagePipeline in Z-Image-Turbo's folder layout: the transformer of ``config`` (default :data:`TINY`),
    a two-layer Qwen3 (``Qwen3Model``, ``cap_feat_dim`` wide: the pipeline reads its second-to-last hidden
    states), the word-level tokenizer with a chat template, FLUX.1's AutoencoderKL layout (no quant convs,
    scaling 0.3611, shift 0.1159; 8 x 8 pixels per latent), the flow-matching Euler scheduler with
    Z-Image-Turbo's static shift 3."""
    from diffusers import AutoencoderKL, FlowMatchEulerDiscreteScheduler, ZImagePipeline
    from transformers import Qwen3Config, Qwen3Model

    config = dict(config or TINY)
    transformer = random_diffusers("ZImageTransformer2DModel", config, seed=seed)
    qwen = randomize(Qwen3Model(Qwen3Config(
        vocab_size=VOCAB, hidden_size=int(config["cap_feat_dim"]), intermediate_size=32, num_hidden_layers=2,
        num_attention_heads=2, num_key_value_heads=1, head_dim=8, max_position_embeddings=max(512, text_len),
        pad_token_id=0, eos_token_id=1, bos_token_id=1, tie_word_embeddings=True)), seed + 1)
    vae = randomize(AutoencoderKL(
        in_channels=3, out_channels=3, down_block_types=["DownEncoderBlock2D"] * 4,
        up_block_types=["UpDecoderBlock2D"] * 4, block_out_channels=[8, 8, 8, 8], layers_per_block=1,
        latent_channels=int(config["in_channels"]), norm_num_groups=4, sample_size=32, scaling_factor=0.3611,
        shift_factor=0.1159, use_quant_conv=False, use_post_quant_conv=False), seed + 2)
    tokenizer = tiny_tokenizer(text_len)
    tokenizer.chat_template = TINY_CHAT_TEMPLATE
    return ZImagePipeline(scheduler=FlowMatchEulerDiscreteScheduler(num_train_timesteps=1000, shift=3.0), vae=vae,
                          text_encoder=qwen, tokenizer=tokenizer, transformer=transformer)
