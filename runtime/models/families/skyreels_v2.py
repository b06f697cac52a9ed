"""SkyReels-V2 on the one model path: video latents [B, C, F, H, W] (patch 1 x 2 x 2), umT5 text (whole on
every rank: cross-attention), diffusion forcing's one timestep per latent frame (the DF checkpoints;
the fullest call, from which the split plan is derived), CLIP image tokens where the config takes them
(``image_dim``: I2V), the fps index where it embeds one (``inject_sample_info``: DF 1.3B); for generate
``SkyReelsV2Pipeline`` (text-to-video, one timestep per sample; true CFG in two calls per step), whose
prompt encoding, call and decode tail are WanPipeline's."""

from __future__ import annotations

from typing import Any, Mapping

import torch

from sporch.runtime.models.build import random_diffusers
from sporch.runtime.models.families import wan
from sporch.runtime.models.tiny_parts import VOCAB, randomize, t5_config, tiny_tokenizer

TINY = dict(patch_size=(1, 2, 2), num_attention_heads=4, attention_head_dim=8, in_channels=4, out_channels=4,
            text_dim=16, freq_dim=16, ffn_dim=32, num_layers=2, cross_attn_norm=True,
            qk_norm="rms_norm_across_heads", eps=1e-6, rope_max_seq_len=64)

#: forward arguments with one row per sample (CFG parallel splits the doubled batch by them)
BATCHED = ("hidden_states", "timestep", "encoder_hidden_states", "encoder_hidden_states_image", "fps")

#: CLIP image tokens an I2V model attends to (the tiny ones: fewer than the published 257)
IMAGE_TOKENS = 3


def inputs(config, *, batch, grid, text_len, generator, dtype=torch.float32):
    f, h, w = grid
    pt, ph, pw = config.get("patch_size", (1, 2, 2))
    out = dict(
        hidden_states=torch.randn(batch, config["in_channels"], f * pt, h * ph, w * pw, generator=generator).to(dtype),
        timestep=(torch.rand(batch, f, generator=generator) * 1000).to(dtype),
        encoder_hidden_states=torch.randn(batch, text_len, config["text_dim"], generator=generator).to(dtype),
        enable_diffusion_forcing=True, return_dict=False)
    if config.get("image_dim"):
        out["encoder_hidden_states_image"] = torch.randn(batch, IMAGE_TOKENS, config["image_dim"],
                                                         generator=generator).to(dtype)
    if config.get("inject_sample_info"):
        out["fps"] = [1] * batch  # the DF pipeline's fps index (0: 16 fps, 1: 24 fps)
    return out


def sampling(inputs, forward):
    """The flow-matching loop's call (runtime/models/inference.py ``denoise``: one timestep per sample)
    with diffusion forcing: every latent frame at the loop's noise level (the DF pipelines' synchronous
    schedule), as the per-frame timestep [B, frames] the class takes."""
    if not inputs.get("enable_diffusion_forcing"):
        return inputs, forward
    frames = int(inputs["timestep"].shape[1])

    def call(timestep, **kw):
        return forward(**kw, timestep=timestep[:, None].expand(-1, frames).contiguous())

    return {**inputs, "timestep": inputs["timestep"][:, 0].contiguous()}, call


def encode(pipe, prompt: str, *, negative: str | None, cfg: bool, text_len: int, device) -> dict[str, Any]:
    """SkyReelsV2Pipeline's ``encode_prompt`` (WanPipeline's: umT5 padded with zeros past the prompt's
    tokens) at the plan's text length; with CFG the negative prompt's too ("" when unset, the call's
    default)."""
    pe, npe = pipe.encode_prompt(prompt, negative_prompt=negative or "", do_classifier_free_guidance=cfg,
                                 max_sequence_length=text_len, device=device)
    return {"prompt_embeds": pe, **({"negative_prompt_embeds": npe} if cfg else {})}


def call_arguments(*, guidance_scale: float, cfg: bool, text_len: int) -> dict[str, Any]:
    """CFG as two calls per step ("cond", then "uncond"; a scale of 1 turns it off); the plan's text length."""
    return {"guidance_scale": guidance_scale if cfg else 1.0, "max_sequence_length": text_len}


def tiny_pipeline(seed: int = 0, config: Mapping[str, Any] | None = None, *, text_len: int = 512,
                  vae_stride: tuple[int, int, int] = (4, 8, 8), **_):
    """SkyReelsV2Pipeline in the published folders' layout (diffusers' convert_skyreelsv2_to_diffusers.py:
    umT5, the Wan2.1 VAE, UniPC): the transformer of ``config`` (default :data:`TINY`), a tiny umT5
    ``text_dim`` wide, AutoencoderKLWan folding ``vae_stride`` frames x pixels per latent with random
    latent statistics, UniPC with flow sigmas and the pipeline's text-to-video shift (8, its docstring)."""
    from diffusers import AutoencoderKLWan, SkyReelsV2Pipeline, UniPCMultistepScheduler
    from transformers import UMT5Config, UMT5EncoderModel

    config = dict(config or TINY)
    transformer = random_diffusers("SkyReelsV2Transformer3DModel", config, seed=seed)
    channels = int(config.get("out_channels") or config["in_channels"])
    text_encoder = randomize(UMT5EncoderModel(t5_config(UMT5Config, VOCAB, int(config["text_dim"]))), seed + 3)
    st, sh, _ = (int(s) for s in vae_stride)
    downs = sh.bit_length() - 1
    temporal = [False] * (downs - (st.bit_length() - 1)) + [True] * (st.bit_length() - 1)
    g = torch.Generator().manual_seed(seed + 1)
    vae = AutoencoderKLWan(base_dim=8, z_dim=channels, dim_mult=[1] * (downs + 1), num_res_blocks=1,
                           temperal_downsample=temporal, scale_factor_temporal=st, scale_factor_spatial=sh,
                           latents_mean=(0.2 * torch.randn(channels, generator=g)).tolist(),
                           latents_std=(1.0 + 0.5 * torch.rand(channels, generator=g)).tolist()).eval()
    scheduler = UniPCMultistepScheduler(prediction_type="flow_prediction", use_flow_sigmas=True,
                                        num_train_timesteps=1000, flow_shift=8.0)
    return SkyReelsV2Pipeline(tokenizer=tiny_tokenizer(text_len), text_encoder=text_encoder, vae=vae,
                              scheduler=scheduler, transformer=transformer)


#: the pipeline's decode tail on kept latents (``sporch decode``): WanPipeline's, the same VAE
decode_latents = wan.decode_latents
