"""What the generic path (any supported diffusers class: runtime/model/generic, and the generic
generate in runtime/pipelines/generic.py) runs, and the one-line refusals of what it does not:
the workloads per family, the generate placements ``auto`` may choose, and the checks the
planner makes on a job whose model is a diffusers class (:func:`check_generic`)."""

from __future__ import annotations

from sporch.orchestrator.config.job import JobSpec
from sporch.orchestrator.contract import sections
from sporch.orchestrator.contract.plan import Layout
from sporch.orchestrator.errors import SporchError
from sporch.orchestrator.models.families import Family, get_family, require_family


#: Workloads the generic path (any supported diffusers class, runtime/model/generic) runs.
GENERIC_WORKLOADS = ("verify", "benchmark")


def generic_workloads(model: sections.ModelSection) -> tuple[str, ...]:
    """The workloads the generic path runs for ``model``: verify and benchmark, and generate where
    the family names the diffusers pipeline it runs (``Family.pipeline_class``)."""
    fam = get_family(model.family) if model.family else None
    return GENERIC_WORKLOADS + (("generate",) if fam is not None and fam.pipeline_class else ())


#: The placements the generic path's generate runs (runtime/pipelines/generic.py: the diffusers
#: pipeline's text encoders on the leader's GPU or its CPU, or sharded with FSDP2 over each sequence
#: group, whose ranks all encode; the leader decodes whole, or in tiles with diffusers'
#: ``enable_tiling`` where the family's VAE has it): what ``auto`` may choose
GENERIC_PLACEMENTS: dict[str, tuple[str, ...]] = {"text_encoder": ("leader", "sharded", "cpu"),
                                                  "vae": ("leader", "tiled")}


def generic_placements(family: Family) -> dict[str, tuple[str, ...]]:
    """:data:`GENERIC_PLACEMENTS` for ``family``: ``vae: tiled`` only where its VAE has a tiled
    decode (``Family.vae_tiling``)."""
    vae = GENERIC_PLACEMENTS["vae"] if family.vae_tiling else ("leader",)
    return {**GENERIC_PLACEMENTS, "vae": vae}


def check_generic_vae(family: Family, vae: str, what: str) -> None:
    """``pipeline.vae`` on the generic generate: leader, or tiled where the family's VAE has a tiled
    decode; parallel is refused (sporch's exact row-split decode is built for the Wan VAE only)."""
    if vae == "parallel":
        raise SporchError(f"pipeline.vae=parallel is not supported for generate on {what}: sporch's exact parallel "
                          "decode is built for the Wan VAE only; set pipeline.vae=tiled or leader")
    if vae not in ("auto", *generic_placements(family)["vae"]):
        raise SporchError(f"pipeline.vae={vae} is not supported for generate on {what}: the family's VAE has no "
                          "tiled decode sporch runs (Family.vae_tiling); set pipeline.vae=leader")


def check_generic_generate(job: JobSpec, what: str, layout: Layout, family: Family) -> None:
    """The generic generate runs the family's diffusers pipeline as it is on every rank of a
    replica, the leader (or, with ``pipeline.text_encoder: sharded``, each sequence group) encoding
    and the leader decoding (runtime/pipelines/generic.py): what it cannot honour is refused in one
    line each."""
    w, p = job.workload, job.pipeline
    # parallel.cfg=2 runs however the pipeline applies CFG (Family.pipeline_cfg: batched or two_calls); one that
    # applies none belongs to a guidance-distilled family, whose cfg 2 the layout check's distilled rule refuses
    for key, value in (("workload.shift", w.shift), ("workload.sigmas", w.sigmas), ("workload.scheduler", w.scheduler),
                       ("workload.image", w.image)):
        if value is not None:
            raise SporchError(f"{key} is not supported for generate on {what} (the pipeline folder's scheduler "
                              f"and text-to-image/video only); remove {key}")
    if w.batch != layout.dp:
        raise SporchError(f"workload.batch={w.batch}: generate on {what} denoises one prompt per pass on each dp "
                          f"replica; set workload.batch={layout.dp} (parallel.dp)")
    # pipeline.text_encoder: every placement runs (GENERIC_PLACEMENTS: leader, sharded, cpu)
    check_generic_vae(family, p.vae, what)
    # model.lora (merged at load) and workload.compile (the blocks, as verify/benchmark) are applied by generic.py


def check_generic(job: JobSpec, model: sections.ModelSection, layout: Layout) -> None:
    """What the generic path does not do yet is refused here, in one line each."""
    if not model.diffusers_class:
        return
    what = f"{model.diffusers_class} (family {model.family}, the generic path)"
    method = job.workload.cache.method  # (the job config allows a cache on denoising workloads only)
    caches = require_family(model.diffusers_class).step_cache
    if method != "none" and method not in caches:
        raise SporchError(f"workload.cache.method={method} is not built for {what}; use "
                          f"{' or '.join((*caches, 'none'))}")
    # method in the family's step_cache: applied by the generic generate (runtime/model/generic/cache.py)
    kinds = generic_workloads(model)
    if job.workload.kind not in kinds:
        raise SporchError(f"workload.kind {job.workload.kind} is not built for {what} yet; "
                          f"use one of: {', '.join(kinds)}")
    if job.workload.kind == "generate":
        family = get_family(model.family)
        why = family.generate_refusal(model.diffusers_config or {}) if family.generate_refusal else None
        if why:
            raise SporchError(f"workload.kind generate is not built for {what}: {why}; use workload.kind verify "
                              "or benchmark")
        check_generic_generate(job, what, layout, family)
