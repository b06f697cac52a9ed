"""Latents -> frames with the folder's VAE and the pipeline's own post-processing.

Runs on one rank per dp replica (the leader, see text.py), after the sequence gather; the
VAE is loaded on first use and kept for the replica's later prompt batches. Placement
(``plan.placement.vae``): ``leader`` decodes whole; ``tiled`` uses diffusers' tiled decode
(``enable_tiling``: overlapping tiles blended, less memory, not exact); ``parallel`` splits
the latent's rows over the leader's sequence group (:mod:`.vae_parallel`, exact), whose ranks
all call the decoder; the frames end on the group's first rank (the leader).

Each family's un-normalisation and post-processing (Wan2.1: per channel, as WanPipeline, decoded as
video; Flux.1: scaling and shift factors, as FluxPipeline, one image) is its record in
:mod:`.families`, looked up by ``plan.model.family``.

Output: float32 numpy in [0, 1]: video [B, F, H, W, 3], image [B, 1, H, W, 3].
"""

from __future__ import annotations

from typing import Any

import torch
import torch.distributed as dist

from sporch.runtime.model import ModelConfig

from .families import pipeline_family
from .params import GenerateParams
from .vae_parallel.decode import decode_rows
from .vae_parallel.surgery import parallelize_decoder


class Decoder:
    """``placement``: leader | tiled | parallel; ``group``: the process group of a parallel
    decode (every rank of it calls the decoder; the frames are returned on its first rank,
    None on the others)."""

    def __init__(self, params: GenerateParams, device: torch.device, dtype: torch.dtype = torch.float32,
                 placement: str = "leader", group: Any = None) -> None:
        from diffusers import DiffusionPipeline

        self.params = params
        self.device = device
        self.family = pipeline_family(params.family)
        drop: dict[str, Any] = {"transformer": None, "text_encoder": None, "tokenizer": None}
        drop.update(dict.fromkeys(self.family.text_parts))
        if params.boundary_ratio is not None:
            drop["transformer_2"] = None  # Wan2.2 A14B's low-noise expert: not for decoding
        self.pipe = DiffusionPipeline.from_pretrained(params.root, dtype=dtype, **drop).to(device)
        self.check()
        self.group = group if placement == "parallel" else None
        if placement == "tiled":
            self.pipe.vae.enable_tiling()
        self.parallel_vae = None
        if self.group is not None:
            self.parallel_vae = parallelize_decoder(self.pipe.vae, self.group)

    def check(self) -> None:
        """The VAE's latent channels and strides must be the model's."""
        cfg = self.pipe.vae.config
        model, params = self.params.model, self.params
        channels = self.family.latent_channels(cfg)
        want = ModelConfig.from_dict(model).out_dim  # the preset's or the checkpoint's knobs too
        if channels != want:
            raise ValueError(f"the VAE in {params.root}/vae has {channels} latent channels, the model {want}: "
                             "use the model settings of this pipeline folder")
        stride = self.family.vae_stride(self.pipe)
        if [int(s) for s in model["vae_stride"]][1:] != stride[1:] or (params.video and model["vae_stride"][0] != stride[0]):
            raise ValueError(f"the VAE in {params.root}/vae has strides {stride}, the job says model.vae_stride "
                             f"{list(model['vae_stride'])}: set model.vae_stride: {stride}")

    @torch.no_grad()
    def __call__(self, latents: torch.Tensor):
        """[B, C, F, H, W] float32 latents -> frames [B, F, H, W, 3] float32 numpy in [0, 1]
        (None on a parallel decode's other ranks)."""
        x = latents.to(self.device, self.pipe.vae.dtype)
        return self.family.decode(self.pipe, x, self._decode)

    def _decode(self, z: torch.Tensor) -> torch.Tensor | None:
        """The VAE's decode of the un-normalised latents: whole, or split over the group."""
        if self.parallel_vae is None:
            return self.pipe.vae.decode(z, return_dict=False)[0]
        whole = decode_rows(self.parallel_vae, z, self.group, lambda vae, part: vae.decode(part, return_dict=False)[0])
        return whole if dist.get_rank(self.group) == 0 else None  # the leader post-processes and writes
