"""PixArt-Sigma on the one model path: latents [B, C, H, W] (patch 2 x 2), T5 text with its mask (whole on
every rank: cross-attention), adaLN-single timestep; PixArt-Alpha 1024's resolution / aspect-ratio
conditions where the config uses them."""

from __future__ import annotations

from typing import Any

import torch

from sporch.orchestrator.models.families.pixart import additional_conditions
from sporch.runtime.models.tiny_parts import autoencoder_kl, randomize, t5_config, tiny_tokenizer, VOCAB

from sporch.runtime.models.build import random_diffusers
from sporch.runtime.models.families.calls import call_default

TINY = dict(num_attention_heads=4, attention_head_dim=8, in_channels=4, out_channels=8, num_layers=2,
            cross_attention_dim=32, caption_channels=16, sample_size=8, patch_size=2, norm_type="ada_norm_single",
            num_embeds_ada_norm=1000, use_additional_conditions=False)

#: forward arguments with one row per sample (CFG parallel splits the doubled batch by them);
#: ``added_cond_kwargs`` is a dict whose tensors (PixArt-Alpha's resolution and aspect ratio) are cut
#: entry by entry (PixArt-Sigma passes None in it)
BATCHED = ("hidden_states", "encoder_hidden_states", "timestep", "encoder_attention_mask", "added_cond_kwargs")


def inputs(config, *, batch, grid, text_len, generator, dtype=torch.float32):
    f, h, w = grid
    p = config.get("patch_size", 2)
    if additional_conditions(config):  # PixArt-Alpha 1024: the image's pixel size and aspect ratio (8 px per latent)
        size = torch.tensor([[h * p * 8.0, w * p * 8.0]] * batch, dtype=dtype)
        cond = {"resolution": size, "aspect_ratio": (size[:, :1] / size[:, 1:]).to(dtype)}
    else:  # as PixArtSigmaPipeline passes them
        cond = {"resolution": None, "aspect_ratio": None}
    return dict(
        hidden_states=torch.randn(batch, config["in_channels"], h * p, w * p, generator=generator).to(dtype),
        encoder_hidden_states=torch.randn(batch, text_len, config["caption_channels"], generator=generator).to(dtype),
        timestep=(torch.rand(batch, generator=generator) * 1000).to(dtype),
        encoder_attention_mask=torch.ones(batch, text_len, dtype=dtype), added_cond_kwargs=cond, return_dict=False)


def encode(pipe, prompt: str, *, negative: str | None, cfg: bool, text_len: int, device) -> dict[str, Any]:
    """PixArtSigmaPipeline's ``encode_prompt`` as its call runs it: T5 padded to the call's default
    length (300), the mask dropping the padding's keys, the caption cleaned as the call's default
    says; with CFG the negative prompt's ("" when unset, the call's default)."""
    n, clean = call_default(pipe, "max_sequence_length"), call_default(pipe, "clean_caption")
    pe, pm, npe, npm = pipe.encode_prompt(prompt, cfg, negative_prompt=negative or "", num_images_per_prompt=1,
                                          device=device, clean_caption=clean, max_sequence_length=n)
    return {"prompt_embeds": pe, "prompt_attention_mask": pm, "negative_prompt_embeds": npe,
            "negative_prompt_attention_mask": npm}


def call_arguments(*, guidance_scale: float, cfg: bool, text_len: int) -> dict[str, Any]:
    """CFG batched into one call (a scale of 1 turns it off); the job's height and width as they are
    (no aspect-ratio binning, which would change the token grid the plan was made for); no negative
    prompt text (its embeddings are passed: the call's default "" would clash with them)."""
    return {"guidance_scale": guidance_scale if cfg else 1.0, "use_resolution_binning": False,
            "negative_prompt": None}


def tiny_pipeline(seed: int = 0, config=None, **_):
    """PixArtSigmaPipeline: a T5 encoder 16 wide (the transformer's caption_channels), AutoencoderKL
    (4 latent channels, 8 x 8 pixels per latent; tiles of 32 pixels), the DPM-Solver++ multistep
    scheduler of PixArt-Sigma-XL-2-1024-MS (scheduler/scheduler_config.json: order 2, linear betas
    1e-4 to 0.02, epsilon prediction). The tokenizer pads every prompt to the pipeline's 300 tokens and
    its mask drops the padding's keys."""
    from diffusers import DPMSolverMultistepScheduler, PixArtSigmaPipeline
    from transformers import T5Config, T5EncoderModel

    config = dict(config or TINY)
    transformer = random_diffusers("PixArtTransformer2DModel", dict(config), seed=seed)
    t5 = randomize(T5EncoderModel(t5_config(T5Config, VOCAB, config["caption_channels"])), seed + 1)
    scheduler = DPMSolverMultistepScheduler(algorithm_type="dpmsolver++", beta_start=0.0001, beta_end=0.02,
                                            beta_schedule="linear", prediction_type="epsilon", solver_order=2,
                                            solver_type="midpoint", lower_order_final=True,
                                            timestep_spacing="linspace")
    return PixArtSigmaPipeline(tokenizer=tiny_tokenizer(300), text_encoder=t5,
                               vae=autoencoder_kl(config["in_channels"], seed + 2), transformer=transformer,
                               scheduler=scheduler)
