"""Checks of the keys only a generate job uses (docs/generate.md): ``workload.prompt`` and the
output keys, and the ``pipeline`` section (where the text encoder, VAE and experts run)."""

from __future__ import annotations

from sporch.orchestrator.config.job_spec import JobSpec, WorkloadSpec
from sporch.orchestrator.contract.vocab import (EXPERT_PLACEMENTS, OUTPUT_FORMATS, SCHEDULERS, TEXT_ENCODER_PLACEMENTS,
                                               VAE_PLACEMENTS)


def validate_generate(w: WorkloadSpec, bad) -> None:
    if w.kind != "generate":
        return
    if (w.prompt is None) == (w.prompt_file is None):
        raise bad("workload.prompt", "generate needs exactly one of workload.prompt or workload.prompt_file")
    if w.output_format is not None and w.output_format not in OUTPUT_FORMATS:
        raise bad("workload.output_format", f"must be one of {', '.join(OUTPUT_FORMATS)}, got {w.output_format!r}")
    if w.output_format == "png" and (w.frames or 1) > 1:
        raise bad("workload.output_format", f"png holds one image but frames is {w.frames}; use mp4")
    if w.scheduler is not None and w.scheduler not in SCHEDULERS:
        raise bad("workload.scheduler", f"must be one of {', '.join(SCHEDULERS)} (or unset: the folder's), "
                  f"got {w.scheduler!r}")
    if w.seq_len is not None:
        raise bad("workload.seq_len", "generate needs the video/image shape (frames, height, width), not seq_len")
    if w.image is not None and not str(w.image).strip():
        raise bad("workload.image", "is empty; give the first frame's image file (image-to-video models only)")


def validate_pipeline(job: JobSpec, bad) -> None:
    """``pipeline.*``: a known placement, and only on a generate job (the others have no text
    encoder or VAE)."""
    for key, allowed in (("text_encoder", TEXT_ENCODER_PLACEMENTS), ("vae", VAE_PLACEMENTS),
                         ("experts", EXPERT_PLACEMENTS)):
        value = getattr(job.pipeline, key)
        if value not in (*allowed, "auto"):
            raise bad(f"pipeline.{key}", f"must be one of {', '.join(allowed)} or auto, got {value!r}")
        if value != "auto" and job.workload.kind != "generate":
            raise bad(f"pipeline.{key}", f"places generate's {key.replace('_', ' ')}, but workload.kind is "
                      f"{job.workload.kind}: remove it (or set workload.kind=generate)")
