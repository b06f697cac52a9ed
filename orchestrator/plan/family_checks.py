"""What every model (its diffusers class run by runtime/models, and generate through its
family's diffusers pipeline in runtime/pipelines/generate_run.py) runs, and the one-line refusals of
what it does not: the workloads per family, the generate placements ``auto`` may choose, and the
checks the planner makes on a job (:func:`check_family`)."""

from __future__ import annotations

from sporch.orchestrator.config.job_spec import JobSpec
from sporch.orchestrator.contract import sections
from sporch.orchestrator.contract.plan import Layout
from sporch.orchestrator.errors import SporchError
from sporch.orchestrator.models.checkpoint_config import find_config, read_json_object
from sporch.orchestrator.models.checkpoint_files import kind
from sporch.orchestrator.models.families import Family, get_family, require_family
from sporch.orchestrator.models.families.derived_plans import read_verdict


#: Workloads every family's class runs (runtime/models).
MODEL_WORKLOADS = ("verify", "benchmark", "inference")


def generic_workloads(model: sections.ModelSection) -> tuple[str, ...]:
    """The workloads ``model`` runs: verify, benchmark and inference, and generate where the
    family names the diffusers pipeline it runs (``Family.pipeline_class``)."""
    fam = get_family(model.family) if model.family else None
    return MODEL_WORKLOADS + (("generate",) if fam is not None and fam.pipeline_class else ())


#: The placements the one model path's generate runs (runtime/pipelines/generate_run.py: the diffusers
#: pipeline's text encoders on the leader's GPU or its CPU, or sharded with FSDP2 over each sequence
#: group, whose ranks all encode; the leader decodes whole, or in tiles with diffusers'
#: ``enable_tiling`` where the family's VAE has it, or the leader's sequence group decodes the rows in
#: parallel where the family's VAE decodes exactly so): what ``auto`` may choose
GENERIC_PLACEMENTS: dict[str, tuple[str, ...]] = {"text_encoder": ("leader", "sharded", "cpu"),
                                                  "vae": ("leader", "parallel", "tiled")}


def latent_rows(model: sections.ModelSection, height: int | None) -> int | None:
    """The latent's rows for an image ``height`` (the VAE's spatial stride), None where unknown."""
    stride = int(model.vae_stride[1]) if model.vae_stride else 0
    return height // stride if height and stride else None


def folder_vae_refusal(model: sections.ModelSection, family: Family) -> str | None:
    """Why the pipeline folder's own VAE (``vae/config.json`` beside ``model.weights``' transformer)
    does not decode exactly by rows although the family's class does (``Family.vae_parallel_refusal``);
    None where it does or there is no such folder."""
    if family.vae_parallel_refusal is None or not model.weights:
        return None
    config = find_config(model.weights)
    vae = config.parent.parent / "vae" / "config.json" if config is not None else None
    if vae is None or config.parent.name != "transformer" or kind(vae) is None:
        return None
    return family.vae_parallel_refusal(read_json_object(vae))


def generate_placements(family: Family, rows: int | None = None, degree: int = 1,
                       vae_refusal: str | None = None) -> dict[str, tuple[str, ...]]:
    """:data:`GENERIC_PLACEMENTS` for ``family``: ``vae: tiled`` only where its VAE has a tiled
    decode (``Family.vae_tiling``), ``vae: parallel`` only where it decodes exactly by row bands
    (``Family.vae_parallel``, and no ``vae_refusal`` for the folder's VAE: :func:`folder_vae_refusal`)
    and the latent's ``rows`` (when known) give each of the ``degree`` ranks of a sequence group one
    at least."""
    spread = rows is None or rows >= degree
    has = {"leader": True, "tiled": family.vae_tiling,
           "parallel": family.vae_parallel and spread and vae_refusal is None}
    return {**GENERIC_PLACEMENTS, "vae": tuple(v for v in GENERIC_PLACEMENTS["vae"] if has[v])}


def check_family_vae(family: Family, vae: str, what: str, rows: int | None = None, degree: int = 1,
                      vae_refusal: str | None = None) -> None:
    """``pipeline.vae`` on generate: leader; tiled where the family's VAE has a tiled
    decode; parallel where it decodes exactly by row bands (``Family.vae_parallel``; the folder's
    VAE: no ``vae_refusal``), over a sequence group of ``degree`` ranks no larger than the latent's
    ``rows``."""
    allowed = generate_placements(family, rows, degree, vae_refusal)["vae"]
    if vae in ("auto", *allowed):
        return
    others = " or ".join(allowed)
    vae_class = family.vae_class or "the family's VAE"
    if vae == "parallel" and family.vae_parallel and vae_refusal is not None:
        raise SporchError(f"pipeline.vae=parallel is not supported for generate on {what} with this folder: "
                          f"{vae_refusal}; set pipeline.vae={others}")
    if vae == "parallel" and family.vae_parallel:
        raise SporchError(f"pipeline.vae=parallel is not supported for generate on {what} at this size: it splits "
                          f"the latent's {rows} rows over the {degree} ranks of a sequence group, fewer rows than "
                          f"ranks; set pipeline.vae={others} or a larger workload.height")
    if vae == "parallel":
        raise SporchError(f"pipeline.vae=parallel is not supported for generate on {what}: {vae_class} is not "
                          "decoded exactly by sporch's row-parallel decode (Family.vae_parallel); set "
                          f"pipeline.vae={others}")
    raise SporchError(f"pipeline.vae={vae} is not supported for generate on {what}: {vae_class} has no tiled "
                      f"decode sporch runs (Family.vae_tiling); set pipeline.vae={others}")


def check_family_generate(job: JobSpec, what: str, layout: Layout, family: Family,
                           rows: int | None = None, vae_refusal: str | None = None) -> None:
    """Generate runs the family's diffusers pipeline as it is on every rank of a
    replica, the leader (or, with ``pipeline.text_encoder: sharded``, each sequence group) encoding
    and the leader decoding (runtime/pipelines/generate_run.py): what it cannot honour is refused in one
    line each."""
    w, p = job.workload, job.pipeline
    # parallel.cfg=2 runs however the pipeline applies CFG (Family.pipeline_cfg: batched or two_calls); one that
    # applies none belongs to a guidance-distilled family, whose cfg 2 the layout check's distilled rule refuses
    if not family.flow_scheduler:
        for key, value in (("workload.shift", w.shift), ("workload.sigmas", w.sigmas),
                           ("workload.scheduler", w.scheduler)):
            if value is not None:
                raise SporchError(f"{key} sets a flow-matching scheduler, but {family.pipeline_class} runs its "
                                  f"folder's own ({family.title}: not flow matching); remove {key}")
    if w.batch != layout.dp:
        raise SporchError(f"workload.batch={w.batch}: generate on {what} denoises one prompt per pass on each dp "
                          f"replica; set workload.batch={layout.dp} (parallel.dp)")
    # pipeline.text_encoder: every placement runs (GENERIC_PLACEMENTS: leader, sharded, cpu)
    check_family_vae(family, p.vae, what, rows, layout.sequence_degree, vae_refusal)
    # model.lora (merged at load) and workload.compile (the blocks, as verify/benchmark) are applied by generic.py


def check_derived_plan(class_name: str) -> None:
    """A class whose split plan sporch derives (``Family.derived``) is refused when its cached verdict
    (``models/families/derived_plans.py``) says the plan is not exact: one line naming the class and
    the largest error. No verdict cached yet: the ranks derive and check it before they use it (or
    ``sporch inspect`` on the folder does it now)."""
    if class_name not in require_family(class_name).derived:
        return
    verdict = read_verdict(class_name)
    if verdict is not None and not verdict.exact:
        raise SporchError(verdict.refusal())


def check_family_cache(method: str, family: Family, what: str) -> None:
    """``workload.cache.method`` on the one model path: one the family lists (``Family.step_cache``:
    the generic denoise applies it, every rank deciding alike), or refused in one line
    with what its classes miss (``Family.step_cache_refusal``)."""
    if method == "none" or method in family.step_cache:
        return
    why = f" ({family.step_cache_refusal})" if family.step_cache_refusal else ""
    raise SporchError(f"workload.cache.method={method} is not built for {what}{why}; use "
                      f"{' or '.join((*family.step_cache, 'none'))}")


def check_family(job: JobSpec, model: sections.ModelSection, layout: Layout) -> None:
    """What a model's class or pipeline does not do is refused here, in one line each. A preflight
    job's model is a stand-in that is never built (cli/preflight_cmd.py): nothing to check."""
    if job.workload.kind == "preflight":
        return
    what = f"{model.diffusers_class} (family {model.family})"
    family = require_family(model.diffusers_class)
    check_derived_plan(model.diffusers_class)
    why = (family.split_refusal(model.diffusers_config or {})
           if family.split_refusal is not None and layout.sequence_degree > 1 else None)
    if why:
        raise SporchError(f"{what} does not split exactly over {layout.sequence_degree} sequence ranks: {why}; "
                          "plan it with parallel.ulysses=1 and parallel.ring=1 (cfg or dp only)")
    # (the job config allows a cache on denoising workloads only)
    check_family_cache(job.workload.cache.method, family, what)
    kinds = generic_workloads(model)
    if job.workload.kind not in kinds:
        why = family.pipeline_refusal if job.workload.kind == "generate" else None
        because = f": {why}" if why else " yet"
        raise SporchError(f"workload.kind {job.workload.kind} is not built for {what}{because}; "
                          f"use one of: {', '.join(kinds)}")
    if job.workload.kind == "generate":
        family = get_family(model.family)
        why = family.generate_refusal(model.diffusers_config or {}) if family.generate_refusal else None
        if why:
            raise SporchError(f"workload.kind generate is not built for {what}: {why}; use workload.kind verify "
                              "or benchmark")
        g = job.workload.guidance_scale
        if family.cfg_from_zero and 0 < g <= 1:
            raise SporchError(f"workload.guidance_scale {g:g} is not built for generate on {what}: "
                              f"{family.pipeline_class} guides for any scale above 0 (its scale counts from 0), "
                              "sporch's CFG from 1; set 0 (no guidance) or a scale above 1")
        check_family_generate(job, what, layout, family, latent_rows(model, job.workload.height),
                               folder_vae_refusal(model, family))
