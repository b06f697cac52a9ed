"""Tiny random pipelines of the generic-path families, in the publishers' diffusers layout, built
offline from tiny configs: the family's real component classes (its diffusers transformer, VAE,
scheduler and pipeline; transformers' text encoders), every weight seeded, the word-level tokenizer
of :mod:`sporch.runtime.model.tiny_parts`.

    save_tiny_generic("sd3", "runs/tiny-sd3")

Each family's builder is its own (``runtime/model/generic/families/<family>.py``: ``tiny_pipeline``):
the generic path's tiny config of the family (``TINY``) with the text widths matched to the tiny
encoders, and a VAE that folds as many pixels and frames per latent as the published one, so the
planner's token grid (``models/families``: ``vae_stride``) is the pipeline's.
"""

from __future__ import annotations

from pathlib import Path

import torch

from sporch.runtime.model.generic.families import family_module, generate_families

from .tiny import save_atomically

__all__ = ["tiny_generic_families", "save_tiny_generic"]


def tiny_generic_families() -> tuple[str, ...]:
    """The families (plan.model.family) whose generic generate has a tiny pipeline."""
    return generate_families()


def save_tiny_generic(family: str, root: str | Path, seed: int = 0) -> Path:
    """Build the tiny ``family`` pipeline and save it at ``root`` (atomically: a temporary folder
    beside it, then a rename); the global RNG is left as it was."""
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        pipe = family_module(family).tiny_pipeline(seed)
    return save_atomically(pipe, root)
