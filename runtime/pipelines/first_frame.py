"""Wan2.2 TI2V-5B's given first frame on this rank's token shard (``expand_timesteps``).

As diffusers' ``WanImageToVideoPipeline`` with ``expand_timesteps``: every step the model sees
the first latent frame's tokens replaced by the image's latent and those tokens at timestep 0,
the others at the step's timestep; the scheduler steps all tokens; the final latents get the
image's frame back. With the patch's time size 1 (TI2V: patch 1 x 2 x 2) the first latent
frame is the first ``h x w`` tokens of the f-major token order, so each rank knows its own from
its global token indices: nothing is communicated.
"""

from __future__ import annotations

import torch

from sporch.runtime.model import ShardedDiT
from sporch.runtime.model.base import patchify


class FirstFrame:
    """``latent``: the image's normalised latent [1, C, 1, H, W] (image_condition.py)."""

    def __init__(self, runner: ShardedDiT, latent: torch.Tensor) -> None:
        if int(runner.cfg.patch[0]) != 1:
            raise ValueError(f"a given first frame needs the patch's time size 1, got patch {tuple(runner.cfg.patch)}")
        tokens, grid = patchify(latent.float(), runner.cfg.patch)
        per_frame = runner.grid[1] * runner.grid[2]
        if tuple(grid) != (1, runner.grid[1], runner.grid[2]):
            raise ValueError(f"the first frame's latent gives token grid {tuple(grid)}, the video's frames "
                             f"{runner.grid[1:]}")
        whole = tokens.new_zeros(1, runner.seq_len, tokens.shape[-1])
        whole[:, :per_frame] = tokens
        device = runner.model.device
        self.tokens = runner.shard(whole).to(device)  # [1, local_len, C*pt*ph*pw]
        self.given = (runner.token_index < per_frame).to(device)[None, :, None]  # this rank's first-frame tokens
        self.noisy = (torch.arange(runner.seq_len) >= per_frame).float()[None]  # [1, seq_len]: 0 on the first frame

    def apply(self, x: torch.Tensor) -> torch.Tensor:
        """This rank's tokens ``x`` [B, local_len, F] with the first frame's replaced by the image's."""
        return torch.where(self.given, self.tokens.to(x.dtype), x)

    def timesteps(self, t: float) -> torch.Tensor:
        """[1, seq_len]: ``t`` per token, 0 on the first frame's."""
        return self.noisy * t
