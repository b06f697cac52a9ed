"""Tiny random pipelines of every family with a generate pipeline, in the publishers' diffusers
layout, built offline from tiny configs: the family's real component classes (its diffusers
transformer, VAE, scheduler and pipeline; transformers' text encoders), every weight seeded, the
word-level tokenizer of :mod:`sporch.runtime.models.tiny_parts`.

    save_tiny_pipeline("sd3", "runs/tiny-sd3")
    save_tiny_pipeline("wan", "runs/tiny-wan22", config=..., boundary_ratio=0.875)

Each family's builder is its own (``runtime/models/families/<family>.py``: ``tiny_pipeline``):
the family's tiny config (``TINY``, or the ``config`` given: the plan's ``diffusers_config``) with
the text widths matched to the tiny encoders, and a VAE that folds as many pixels and frames per
latent as the published one, so the planner's token grid (``models/families``: ``vae_stride``) is
the pipeline's. ``workload.tiny_weights`` makes a generate job build its folder this way when it
is missing (:func:`ensure_tiny_pipeline`).
"""

from __future__ import annotations

import shutil
import tempfile
from pathlib import Path
from typing import Any, Mapping

import torch
import torch.distributed as dist

from sporch.runtime.models.families import family_module, generate_families
from sporch.runtime.parallel import ParallelContext

from sporch.runtime.pipelines.params import GenerateParams

__all__ = ["tiny_generic_families", "save_tiny_pipeline", "ensure_tiny_pipeline", "save_atomically"]


def tiny_generic_families() -> tuple[str, ...]:
    """The families (plan.model.family) whose generate has a tiny pipeline."""
    return generate_families()


def save_tiny_pipeline(family: str, root: str | Path, seed: int = 0, config: Mapping[str, Any] | None = None,
                      **facts: Any) -> Path:
    """Build the tiny ``family`` pipeline (its transformer of ``config``, default the family's tiny
    one; ``facts``: what a pipeline folder adds, e.g. ``text_len``, ``vae_stride``,
    ``boundary_ratio``, ``expand_timesteps``, for the families that take them) and save it at
    ``root`` (atomically: a temporary folder beside it, then a rename); the global RNG is left as
    it was."""
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        pipe = family_module(family).tiny_pipeline(seed, config, **facts)
    return save_atomically(pipe, root)


def ensure_tiny_pipeline(spec: GenerateParams, ctx: ParallelContext | None) -> None:
    """With ``workload.tiny_weights``: rank 0 builds the tiny random pipeline of the plan's model
    (its ``diffusers_config``, text length, VAE strides, experts, per-token timesteps) at
    ``model.weights`` when the folder is missing; the others wait for it."""
    if not spec.tiny_weights:
        return
    if (ctx is None or ctx.rank == 0) and not Path(spec.root).exists():
        m = spec.model
        save_tiny_pipeline(spec.family, spec.root, config=m.get("diffusers_config"), text_len=int(m["text_len"]),
                          vae_stride=tuple(m["vae_stride"]), boundary_ratio=m.get("boundary_ratio"),
                          expand_timesteps=bool(m.get("expand_timesteps")))
    if ctx is not None and dist.is_initialized():
        with ctx.guard():
            dist.barrier()


def save_atomically(pipe: Any, root: str | Path) -> Path:
    """``pipe.save_pretrained`` into a temporary folder beside ``root``, then a rename: ``root``
    holds a whole pipeline or nothing."""
    root = Path(root)
    root.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{root.name}-", dir=root.parent))
    try:
        pipe.save_pretrained(tmp)
        tmp.rename(root)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return root
