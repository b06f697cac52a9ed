"""Latents -> frames with the folder's VAE and the pipeline's own post-processing.

Runs on one rank per dp replica (the leader, see text.py), after the sequence gather; the
VAE is loaded on first use and kept for the replica's later prompt batches.

* Wan2.1 (AutoencoderKLWan): ``latents / (1 / latents_std) + latents_mean`` per channel, as
  WanPipeline; the VAE decodes frame chunks causally, so its working set follows one chunk.
* Flux.1 (AutoencoderKL): ``latents / scaling_factor + shift_factor``, as FluxPipeline.

Output: float32 numpy in [0, 1]: video [B, F, H, W, 3], image [B, 1, H, W, 3].
"""

from __future__ import annotations

from typing import Any

import torch

from .spec import GenerateSpec


class Decoder:
    def __init__(self, spec: GenerateSpec, device: torch.device, dtype: torch.dtype = torch.float32) -> None:
        from diffusers import DiffusionPipeline

        self.spec = spec
        self.device = device
        drop: dict[str, Any] = {"transformer": None, "text_encoder": None, "tokenizer": None}
        if spec.family == "flux":
            drop.update(text_encoder_2=None, tokenizer_2=None)
        self.pipe = DiffusionPipeline.from_pretrained(spec.root, dtype=dtype, **drop).to(device)
        self.check()

    def check(self) -> None:
        """The VAE's latent channels and strides must be the model's."""
        cfg = self.pipe.vae.config
        model, spec = self.spec.model, self.spec
        channels = cfg.z_dim if spec.family == "wan" else cfg.latent_channels
        want = int(model.get("out_channels") or model["in_channels"])
        if channels != want:
            raise ValueError(f"the VAE in {spec.root}/vae has {channels} latent channels, the model {want}: "
                             "use the model settings of this pipeline folder")
        stride = ([self.pipe.vae_scale_factor_temporal, self.pipe.vae_scale_factor_spatial,
                   self.pipe.vae_scale_factor_spatial] if spec.family == "wan"
                  else [1, self.pipe.vae_scale_factor, self.pipe.vae_scale_factor])
        if [int(s) for s in model["vae_stride"]][1:] != stride[1:] or (spec.video and model["vae_stride"][0] != stride[0]):
            raise ValueError(f"the VAE in {spec.root}/vae has strides {stride}, the job says model.vae_stride "
                             f"{list(model['vae_stride'])}: set model.vae_stride: {stride}")

    @torch.no_grad()
    def __call__(self, latents: torch.Tensor):
        """[B, C, F, H, W] float32 latents -> frames [B, F, H, W, 3] float32 numpy in [0, 1]."""
        vae = self.pipe.vae
        x = latents.to(self.device, vae.dtype)
        if self.spec.family == "wan":
            c = vae.config.z_dim
            mean = torch.tensor(vae.config.latents_mean).view(1, c, 1, 1, 1).to(x.device, x.dtype)
            inv_std = 1.0 / torch.tensor(vae.config.latents_std).view(1, c, 1, 1, 1).to(x.device, x.dtype)
            video = vae.decode(x / inv_std + mean, return_dict=False)[0]
            return self.pipe.video_processor.postprocess_video(video, output_type="np")
        x = x[:, :, 0] / vae.config.scaling_factor + vae.config.shift_factor
        image = vae.decode(x, return_dict=False)[0]
        return self.pipe.image_processor.postprocess(image, output_type="np")[:, None]
