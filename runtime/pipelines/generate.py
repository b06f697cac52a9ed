"""The generate workload: prompts -> the family's diffusers pipeline around the sequence-parallel
transformer -> one MP4/PNG per prompt (runtime/pipelines/generate_run.py, docs/generate.md), and
``sporch decode RUN_DIR``: a job's kept latents decoded in one process, nothing denoised.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Callable

import torch

from sporch.orchestrator.contract.plan import Plan
from sporch.orchestrator.models.families import get_family
from sporch.orchestrator.models.generate_inputs import require_pipelines
from sporch.runtime.parallel import ParallelContext
from sporch.runtime.progress import Progress

from sporch.runtime.pipelines.generate_run import run_pipeline
from sporch.runtime.pipelines.kept_latents import KeptLatents, decodes_latents
from sporch.runtime.pipelines.load import load_pipeline
from sporch.runtime.pipelines.resume import FinishedPrompts
from sporch.runtime.pipelines.output import write_prompt
from sporch.runtime.pipelines.params import generate_params
from sporch.runtime.pipelines.phase_timing import PhaseTimer
from sporch.runtime.pipelines.step_checkpoint import plan_key

__all__ = ["run_generate", "decode_saved"]


def run_generate(plan: Plan, ctx: ParallelContext | None, device: torch.device, output_dir: Path,
                 log: Callable[[ParallelContext | None, str], None] | None = None,
                 frames_sink: Callable[[int, Any], None] | None = None,
                 progress: Progress | None = None,
                 compile_model: Callable[[torch.nn.Module], Any] | None = None) -> dict[str, Any]:
    """Run the generate workload of ``plan`` on this rank (runtime/pipelines/generate_run.py);
    ``frames_sink(index, frames)`` (tests) also receives each prompt's decoded float frames
    [F, H, W, 3] on the leader."""
    require_pipelines()
    return run_pipeline(plan, ctx, device, output_dir, log=log, frames_sink=frames_sink,
                                compile_model=compile_model, progress=progress)


def decode_saved(plan: Plan, device: torch.device, output_dir: Path,
                 log: Callable[[ParallelContext | None, str], None] | None = None) -> list[dict[str, Any]]:
    """Decode every prompt whose latents ``output_dir`` keeps (one process: the pipeline's VAE and
    decode tail, no text encoder, no denoising): what ``sporch decode RUN_DIR`` does. Returns the
    files written."""
    require_pipelines()
    spec = generate_params(plan)
    family = get_family(plan.model.family)
    if not decodes_latents(family):
        raise FileNotFoundError(f"sporch decode is not built for family {family.name} (its runtime module has no "
                                "decode_latents): run the job again to denoise and decode its prompts")
    kept = KeptLatents(spec, output_dir, None)
    indices = kept.store.saved()
    if not indices:
        raise FileNotFoundError(f"no latents of this job in {kept.store.folder} (the job saves them once a prompt is "
                                "denoised); run the job")
    for i in indices:  # every file checked against what the job wrote before any decoding
        kept.store.load([i])
    class_name = family.image_pipeline_class if spec.image else family.pipeline_class
    pipe = load_pipeline(spec, class_name, device, text=False, transformers=False)
    if plan.placement.vae == "tiled" and family.vae_tiling:
        pipe.vae.enable_tiling()
    finished, stages = FinishedPrompts(output_dir, plan_key(plan)), PhaseTimer(device)
    say = log or (lambda c, m: print(m, flush=True))
    written: list[dict[str, Any]] = []
    for i in indices:
        row, _ = write_prompt(kept.decode(pipe, family, i, spec), spec, i, spec.seed + i, output_dir, stages, finished)
        written.append(row)
        say(None, f"wrote {row['path']}")
    return written
