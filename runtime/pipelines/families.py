"""What the generate pipeline does differently per model family, one record per family, found by
one lookup of ``plan.model.family`` (the planner's record; torch-free facts such as the folder's
sub-folders and video-or-image live in sporch.orchestrator.models.families).

* Wan2.1 / Wan2.2 (WanPipeline, AutoencoderKLWan): umT5 prompt and negative prompt; latents
  un-normalised per channel (``latents / (1 / latents_std) + latents_mean``), decoded as video; the
  folder's scheduler with ``set_timesteps(steps)`` (or the job's sigmas); ``workload.shift`` sets
  the Euler scheduler's ``shift``.
* Flux.1 (FluxPipeline, AutoencoderKL): T5 hidden states + CLIP's pooled vector, no negative
  prompt; ``latents / scaling_factor + shift_factor``, decoded as one image; sigmas
  ``linspace(1, 1/steps, steps)`` with the resolution-dependent ``mu`` (``calculate_shift``);
  ``workload.shift`` replaces the dynamic mu with a fixed shift.

Adding a family with a generate pipeline = one record here, its tiny pipeline in tiny.py's
``TINY_PIPELINES`` and its torch-free facts in its models/families module.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Sequence

import torch

from sporch.runtime.model.finite import check_output


@dataclass(frozen=True)
class PipelineFamily:
    name: str
    #: pipeline components besides transformer / text_encoder / tokenizer not loaded for decoding
    text_parts: tuple[str, ...]
    #: the VAE config's latent channel count
    latent_channels: Callable[[Any], int]
    #: the pipeline's VAE strides [frames, height, width]
    vae_stride: Callable[[Any], list[int]]
    #: (pipe, prompts, negative prompt, cfg, text_len, device, dtype) -> (condition, negative or None)
    encode: Callable[..., tuple[Any, Any]]
    #: (pipe, latents [B, C, F, H, W] in the VAE's dtype, decode) -> float32 numpy frames
    #: [B, F, H, W, 3] in [0, 1], or None on a parallel decode's other ranks
    decode: Callable[..., Any]
    #: workload.shift -> the flow-matching Euler scheduler's config overrides
    euler_shift: Callable[[float], dict]
    #: (params, scheduler, image tokens, device) -> the scheduler's timesteps for params.steps steps
    timesteps: Callable[..., torch.Tensor]


def _wan_encode(pipe, prompts: Sequence[str], negative: str | None, cfg: bool, text_len: int, device, dtype):
    pos, neg = pipe.encode_prompt(list(prompts), negative_prompt=negative or "", do_classifier_free_guidance=cfg,
                                  max_sequence_length=text_len, device=device, dtype=dtype)
    return pos, (neg if cfg else None)


def _flux_encode(pipe, prompts: Sequence[str], negative: str | None, cfg: bool, text_len: int, device, dtype):
    text, pooled, _ = pipe.encode_prompt(list(prompts), prompt_2=None, device=device, max_sequence_length=text_len)
    return {"text": text.to(dtype), "pooled": pooled.to(dtype)}, None


def _wan_decode(pipe, x: torch.Tensor, decode: Callable[[torch.Tensor], Any]):
    vae = pipe.vae
    c = vae.config.z_dim
    mean = torch.tensor(vae.config.latents_mean).view(1, c, 1, 1, 1).to(x.device, x.dtype)
    inv_std = 1.0 / torch.tensor(vae.config.latents_std).view(1, c, 1, 1, 1).to(x.device, x.dtype)
    video = decode(x / inv_std + mean)
    check_output(video, "generate (decoded frames)")  # post-processing would clamp inf, keep NaN
    return None if video is None else pipe.video_processor.postprocess_video(video, output_type="np")


def _flux_decode(pipe, x: torch.Tensor, decode: Callable[[torch.Tensor], Any]):
    vae = pipe.vae
    image = decode(x[:, :, 0] / vae.config.scaling_factor + vae.config.shift_factor)
    check_output(image, "generate (decoded image)")
    return None if image is None else pipe.image_processor.postprocess(image, output_type="np")[:, None]


def _wan_timesteps(params, scheduler, image_tokens: int, device: torch.device) -> torch.Tensor:
    if params.sigmas is not None:  # workload.sigmas (euler): the recipe's list, shifted by the scheduler
        scheduler.set_timesteps(sigmas=list(params.sigmas), device=device)
    else:
        scheduler.set_timesteps(params.steps, device=device)
    return scheduler.timesteps


def _flux_timesteps(params, scheduler, image_tokens: int, device: torch.device) -> torch.Tensor:
    import numpy as np
    from diffusers.pipelines.flux.pipeline_flux import calculate_shift, retrieve_timesteps

    cfg = scheduler.config
    sigmas = None if cfg.get("use_flow_sigmas") else np.linspace(1.0, 1 / params.steps, params.steps)
    if params.sigmas is not None:
        sigmas = np.array(params.sigmas)
    mu = calculate_shift(image_tokens, cfg.get("base_image_seq_len", 256), cfg.get("max_image_seq_len", 4096),
                         cfg.get("base_shift", 0.5), cfg.get("max_shift", 1.15))
    out, _ = retrieve_timesteps(scheduler, params.steps, device, sigmas=sigmas, mu=mu)
    return out


WAN = PipelineFamily(
    name="wan", text_parts=(), latent_channels=lambda cfg: cfg.z_dim,
    vae_stride=lambda pipe: [pipe.vae_scale_factor_temporal, pipe.vae_scale_factor_spatial,
                             pipe.vae_scale_factor_spatial],
    encode=_wan_encode, decode=_wan_decode, euler_shift=lambda shift: {"shift": shift},
    timesteps=_wan_timesteps)
FLUX = PipelineFamily(
    name="flux", text_parts=("text_encoder_2", "tokenizer_2"), latent_channels=lambda cfg: cfg.latent_channels,
    vae_stride=lambda pipe: [1, pipe.vae_scale_factor, pipe.vae_scale_factor],
    encode=_flux_encode, decode=_flux_decode,
    euler_shift=lambda shift: {"shift": shift, "use_dynamic_shifting": False},
    timesteps=_flux_timesteps)

_BY_NAME = {f.name: f for f in (WAN, FLUX)}


def pipeline_family(name: str) -> PipelineFamily:
    """The generate pipeline of family ``name`` (plan.model.family)."""
    try:
        return _BY_NAME[name]
    except KeyError:
        raise KeyError(f"no generate pipeline for family {name!r}; known: {', '.join(_BY_NAME)}") from None
