"""Image-to-video: the first frame as a latent condition, concatenated to the noisy latents along
channels at every step (Wan2.1 I2V, Wan2.2 I2V A14B), and, for Wan2.1 I2V, as CLIP image tokens.

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

Wan2.1 I2V (a transformer with ``image_dim``) also reads the image as CLIP tokens, as
``WanImageToVideoPipeline.encode_image`` does: the folder's ``image_processor`` (CLIPImageProcessor:
resize, centre crop, normalise) on the image file as it is, then the ``image_encoder``
(CLIPVisionModel, float32) and its penultimate hidden states ([1, 257, 1280] for the published
ViT-H/14), the same for every prompt and for the negative one.
"""

from __future__ import annotations

import torch

from .params import GenerateParams


def image_condition(params: GenerateParams, device: torch.device) -> torch.Tensor:
    """The first frame's latent condition of ``params`` ([1, st + C, F, H, W], float32, on ``device``);
    Wan2.2 TI2V (``params.expand_timesteps``): the image's own latent frame [1, C, 1, H, W]."""
    from diffusers import AutoencoderKLWan
    from diffusers.utils import load_image
    from diffusers.video_processor import VideoProcessor

    st, sh, _ = (int(s) for s in params.model["vae_stride"])
    vae = AutoencoderKLWan.from_pretrained(params.root, subfolder="vae", dtype=torch.float32).to(device).eval()
    image = VideoProcessor(vae_scale_factor=sh).preprocess(load_image(params.image), height=params.height,
                                                           width=params.width).to(device, torch.float32)
    image = image.unsqueeze(2)  # [1, 3, 1, H, W]
    video = image if params.expand_timesteps else \
        torch.cat([image, image.new_zeros(1, 3, params.frames - 1, params.height, params.width)], dim=2)
    with torch.no_grad():
        latent = vae.encode(video).latent_dist.mode().float()
    c = latent.shape[1]
    mean = torch.tensor(vae.config.latents_mean, device=device).view(1, c, 1, 1, 1)
    inv_std = 1.0 / torch.tensor(vae.config.latents_std, device=device).view(1, c, 1, 1, 1)
    latent = (latent - mean) * inv_std
    if params.expand_timesteps:
        return latent
    f, h, w = latent.shape[2:]
    mask = torch.zeros(1, st, f, h, w, device=device)
    mask[:, :, 0] = 1.0  # the first latent frame holds the given image's st video frames
    del vae
    return torch.cat([mask, latent], dim=1)


def image_tokens(params: GenerateParams, device: torch.device) -> torch.Tensor:
    """``workload.image`` as CLIP image tokens [1, L, image_dim] (float32, on ``device``): the
    folder's CLIPImageProcessor and CLIPVisionModel, the encoder's penultimate hidden states."""
    from diffusers.utils import load_image
    from transformers import CLIPImageProcessor, CLIPVisionModel

    processor = CLIPImageProcessor.from_pretrained(params.root, subfolder="image_processor")
    encoder = CLIPVisionModel.from_pretrained(params.root, subfolder="image_encoder", dtype=torch.float32).to(device).eval()
    pixels = processor(images=load_image(params.image), return_tensors="pt")["pixel_values"].to(device)
    with torch.no_grad():
        tokens = encoder(pixel_values=pixels, output_hidden_states=True).hidden_states[-2].float()
    del encoder
    return tokens
