"""Each prompt's final latents kept by the replica's leader (:class:`.latent_files.LatentStore`), and the
prompts decoded from them without denoising (runtime/pipelines/generate_run.py, ``sporch decode``).

At a prompt's last step the pipeline's step callback hands the latents over before the pipeline's
decode tail runs: the leader writes them (float32, with the job's fingerprint). A later run of the
same job decodes a prompt whose latents are kept and whose output is not written with the
family's ``decode_latents`` (its runtime module: the pipeline's own decode tail on them), without
the text encoders or a denoising step; a family without one denoises again.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch

from sporch.orchestrator.models.families import Family
from sporch.runtime.models.families import family_module
from sporch.runtime.parallel import ParallelContext

from sporch.runtime.pipelines.latent_files import LatentStore, cache_label
from sporch.runtime.pipelines.params import GenerateParams
from sporch.runtime.pipelines.replica import share_from_leader

__all__ = ["KeptLatents", "decodes_latents"]


def decodes_latents(family: Family) -> bool:
    """Whether the family's runtime module decodes kept latents (``decode_latents``)."""
    return callable(getattr(family_module(family.name), "decode_latents", None))


class KeptLatents:
    """The job's kept latents (``output_dir/latents``) for ``spec``; ``cache``: the plan's
    ``workload.cache`` (latents of another cache are not reused, runtime/pipelines/latent_files.py)."""

    def __init__(self, spec: GenerateParams, output_dir: str | Path, cache: Any) -> None:
        self.spec = spec
        self.store = LatentStore(spec, output_dir, step_cache=cache_label(cache))

    def keep(self, index: int, latents: torch.Tensor) -> None:
        """Prompt ``index``'s final latents (the pipeline's batch of one), written by the leader."""
        self.store.save([index], latents)

    def agreed(self, ctx: ParallelContext | None, indices: list[int], family: Family) -> list[int]:
        """Those of ``indices`` whose latents are kept for this very job and which the family can
        decode without denoising, as the replica's leader finds them, on every rank (collective)."""
        if not decodes_latents(family):
            return []
        return share_from_leader(ctx, lambda: [i for i in indices if self.store.has(i)],
                                 "reading the kept latents")

    def decode(self, pipe: Any, family: Family, index: int, spec: GenerateParams):
        """Prompt ``index``'s kept latents decoded by the family's ``decode_latents`` (the pipeline's
        decode tail): float frames [1, F, H, W, 3] in [0, 1]."""
        vae = pipe.vae
        latents = self.store.load([index]).to(next(vae.parameters()).device)
        with torch.no_grad():
            return family_module(family.name).decode_latents(pipe, latents, height=spec.height, width=spec.width)
