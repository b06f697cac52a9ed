"""Image-to-video without a CLIP image encoder (Wan2.2 I2V A14B): the first frame as a latent
condition, concatenated to the noisy latents along channels at every step.

As diffusers' ``WanImageToVideoPipeline.prepare_latents``: the image is resized to the video's
height x width (``VideoProcessor.preprocess``), followed by ``frames - 1`` black frames and
encoded by the folder's VAE (the distribution's mode), normalised per channel with the VAE's
``latents_mean`` / ``latents_std``; in front of it a mask of ``vae_stride[0]`` channels per
latent frame: ones for the first frame's ``st`` video frames, zeros after. The result,
[1, st + C, F, H, W] float32, is the condition's ``latents`` (sporch.runtime.model.condition),
the same for the prompt and the negative prompt.

Wan2.2 TI2V-5B (``expand_timesteps``, as ``WanImageToVideoPipeline`` with that flag): the image is
encoded alone (one latent frame, normalised the same way, no mask); the denoising loop keeps
that frame's tokens equal to it at timestep 0 (generate.py, :class:`FirstFrame`).
"""

from __future__ import annotations

import torch

from .spec import GenerateSpec


def image_condition(spec: GenerateSpec, device: torch.device) -> torch.Tensor:
    """The first frame's latent condition of ``spec`` ([1, st + C, F, H, W], float32, on ``device``);
    Wan2.2 TI2V (``spec.expand_timesteps``): the image's own latent frame [1, C, 1, H, W]."""
    from diffusers import AutoencoderKLWan
    from diffusers.utils import load_image
    from diffusers.video_processor import VideoProcessor

    st, sh, _ = (int(s) for s in spec.model["vae_stride"])
    vae = AutoencoderKLWan.from_pretrained(spec.root, subfolder="vae", dtype=torch.float32).to(device).eval()
    image = VideoProcessor(vae_scale_factor=sh).preprocess(load_image(spec.image), height=spec.height,
                                                           width=spec.width).to(device, torch.float32)
    image = image.unsqueeze(2)  # [1, 3, 1, H, W]
    video = image if spec.expand_timesteps else \
        torch.cat([image, image.new_zeros(1, 3, spec.frames - 1, spec.height, spec.width)], dim=2)
    with torch.no_grad():
        latent = vae.encode(video).latent_dist.mode().float()
    c = latent.shape[1]
    mean = torch.tensor(vae.config.latents_mean, device=device).view(1, c, 1, 1, 1)
    inv_std = 1.0 / torch.tensor(vae.config.latents_std, device=device).view(1, c, 1, 1, 1)
    latent = (latent - mean) * inv_std
    if spec.expand_timesteps:
        return latent
    f, h, w = latent.shape[2:]
    mask = torch.zeros(1, st, f, h, w, device=device)
    mask[:, :, 0] = 1.0  # the first latent frame holds the given image's st video frames
    del vae
    return torch.cat([mask, latent], dim=1)
