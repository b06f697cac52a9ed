"""``make_plan(cluster, job) -> Plan``.

The only files the planner reads are the checkpoint's metadata: ``model.weights``' config.json
(and its pipeline folder's model_index.json and vae/config.json; on the one model path its text
encoders' and VAE's safetensors headers, models/pipeline_sizes.py) and the LoRA adapters' safetensors
headers. :func:`resolve_job_model` reads them, once per plan, into the plain ``plan.model`` section;
everything after it is pure (no I/O, no clock, no randomness) and takes that section.

``auto`` dimensions are filled by :class:`~sporch.orchestrator.plan.ranking.FastestChooser`, which
plans each candidate with :func:`plan_with_layout` (handed to it, with the model already resolved:
ranking never imports this module). :func:`rank_feasible` ranks every feasible layout of a job
(``sporch plan --rank``), also from one resolution.
"""

from __future__ import annotations

import dataclasses
import functools
from typing import Optional

from sporch.orchestrator.config.cluster import bandwidth_warnings
from sporch.orchestrator.config.job import job_relative
from sporch.orchestrator.config.job_container import effective_container
from sporch.orchestrator.config.job_spec import JobSpec, ParallelSpec, WorkloadSpec
from sporch.orchestrator.config.loading import to_plain
from sporch.orchestrator.errors import SporchError
from sporch.orchestrator.plan.plan_prediction import with_prediction
from sporch.orchestrator.contract.estimates_section import Estimates
from sporch.orchestrator.plan.estimates import GIB, estimate, parameter_parts
from sporch.orchestrator.plan.layouts import (
    LayoutContext,
    LayoutError,
    feasible_layouts,
    feasible_text,
    resolve_layout,
)
from sporch.orchestrator.plan.pipeline_estimate import with_pipeline
from sporch.orchestrator.plan.experts import with_experts
from sporch.orchestrator.plan.family_checks import check_family, folder_vae_refusal, generate_placements, latent_rows
from sporch.orchestrator.plan.adapters import with_lora
from sporch.orchestrator.plan.placement import choose_placement
from sporch.orchestrator.plan.staging_estimate import staging_estimate
from sporch.orchestrator.plan.ranking import FastestChooser, Ranked, most_preferred, rank
from sporch.orchestrator.plan.resolve import resolve_model
from sporch.orchestrator.plan.sequence_shape import sequence_shape
from sporch.orchestrator.contract.parallel import DIMS, MAX_WORLD, runs_cfg
from sporch.orchestrator.contract.plan import Layout, Plan
from sporch.orchestrator.contract import sections
from sporch.orchestrator.models.families import PipelineCfg, get_family, published_magcache_ratios, sequence_split
from sporch.orchestrator.contract.quant import fp8_capable
from sporch.orchestrator.contract.vocab import FP8_QUANT
from sporch.orchestrator.models.generate_inputs import image_to_video, takes_image
from sporch.orchestrator.contract.numbers import counted


def cfg_on(model: sections.ModelSection, w: WorkloadSpec) -> bool:
    """Whether classifier-free guidance runs (two branches per step): guidance_scale > 1 on a
    model with a CFG branch. A guidance-distilled model (``model.distilled``) has none: it takes
    guidance_scale as an embedded input (``guidance_embed``) or, without that input, refuses > 1;
    it has no negative prompt either."""
    if not model.distilled:
        return runs_cfg(w.guidance_scale, distilled=False)
    name = model.preset or "this model"
    if not model.guidance_embed and w.guidance_scale > 1:
        raise SporchError(
            f"{name} is guidance-distilled without a guidance input (one pass per step, no classifier-free "
            f"guidance): set workload.guidance_scale <= 1 (got {w.guidance_scale:g})"
        )
    if w.negative_prompt:
        raise SporchError(f"{name} is guidance-distilled (one pass per step, no classifier-free-guidance branch), "
                          "so workload.negative_prompt has nothing to steer: remove it")
    return runs_cfg(w.guidance_scale, distilled=True)


def layout_context(cluster: sections.ClusterSpec, job: JobSpec, model: sections.ModelSection,
                   seq_len: int) -> LayoutContext:
    nodes = job.resources.nodes if job.resources.nodes is not None else cluster.nodes
    if nodes > cluster.nodes:
        raise SporchError(
            f"resources.nodes {nodes} exceeds the {counted(cluster.nodes, 'node')} of {cluster.name}; "
            f"use resources.nodes <= {cluster.nodes} or a bigger cluster"
        )
    if nodes * cluster.gpus_per_node > MAX_WORLD:
        fit = MAX_WORLD // cluster.gpus_per_node
        fix = (f"set resources.nodes <= {fit}" if fit else
               f"{cluster.name} has more GPUs per node ({cluster.gpus_per_node}) than that")
        raise SporchError(
            f"{nodes} nodes x {cluster.gpus_per_node} GPUs = {nodes * cluster.gpus_per_node} ranks on "
            f"{cluster.name}; sporch plans jobs of at most {MAX_WORLD} ranks: {fix}"
        )
    return LayoutContext(
        cluster=cluster.name,
        nodes=nodes,
        gpus_per_node=cluster.gpus_per_node,
        num_heads=model.num_heads,
        num_kv_heads=model.num_kv_heads,
        batch=job.workload.batch,
        guidance=cfg_on(model, job.workload),
        seq_len=seq_len,
        distilled=(model.preset or "this model") if model.distilled else None,
        split=sequence_split(model)[0],
    )


def resolve_job_model(job: JobSpec) -> sections.ModelSection:
    """The job's complete ``plan.model``: the preset or the checkpoint's config.json, the pipeline
    folder's experts, the LoRA adapters checked against it, the quantisation asked for. The
    planner's one reading of files. A preflight job's model is a stand-in shape that is never
    built: its ``model.weights`` are only checked for readability on every node (whatever model
    they hold), so its checkpoint is not read as the model's definition."""
    model = job_model(job)
    return dataclasses.replace(with_lora(model, job.model.lora, job.source), quant=job.model.quant)


def job_model(job: JobSpec) -> sections.ModelSection:
    """``job``'s model section from its preset or checkpoint config (no LoRA): a preflight job's
    is the stand-in shape with the weights path kept."""
    if job.workload.kind != "preflight" or not job.model.weights:
        return resolve_model(job.model)
    model = resolve_model(dataclasses.replace(job.model, weights=None))
    return dataclasses.replace(model, weights=job.model.weights)


def job_context(cluster: sections.ClusterSpec, job: JobSpec,
                model: Optional[sections.ModelSection] = None) -> LayoutContext:
    """The :class:`LayoutContext` of ``job`` on ``cluster`` (its model resolved unless given, its sequence length)."""
    model = model if model is not None else job_model(job)
    seq_len, _grid = sequence_shape(model, job.workload)
    return layout_context(cluster, job, model, seq_len)


def sequence_section(seq_len: int, grid: list[int], layout: Layout,
                     model: sections.ModelSection) -> sections.SequenceSection:
    """The sequence cut over ``layout``'s sequence ranks the way ``model``'s path cuts it
    (contract/families ``sequence_split``: the one model path unpadded, its family's text split)."""
    split, text = sequence_split(model)
    return sections.SequenceSection.build(seq_len, grid, layout.sequence_degree, split=split, text_len=text)


def heads_section(model: sections.ModelSection, layout: Layout) -> sections.HeadsSection:
    return sections.HeadsSection.build(model.num_heads, model.num_kv_heads, layout.ulysses)


def workload_section(w: WorkloadSpec, model: sections.ModelSection,
                     source: Optional[str] = None) -> sections.WorkloadSection:
    return sections.WorkloadSection(
        kind=w.kind,
        batch=w.batch,
        frames=w.frames if w.frames is not None else (None if w.seq_len is not None else 1),
        height=w.height,
        width=w.width,
        seq_len=w.seq_len,
        steps=w.steps,
        guidance_scale=float(w.guidance_scale),
        cfg_enabled=cfg_on(model, w),
        dtype=w.dtype,
        warmup=w.warmup,
        repeat=w.repeat,
        seed=w.seed,
        shift=None if w.shift is None else float(w.shift),
        compile=w.compile,
        prompt=w.prompt,
        prompt_file=job_relative(w.prompt_file, source),
        negative_prompt=w.negative_prompt,
        scheduler=w.scheduler,
        output_format=w.output_format,
        fps=w.fps,
        tiny_weights=bool(w.tiny_weights),
        guidance_scale_2=None if w.guidance_scale_2 is None else float(w.guidance_scale_2),
        image=job_relative(w.image, source),
        cache=cache_section(w),
        attention_precision=w.attention_precision,
        sigmas=None if w.sigmas is None else [float(x) for x in w.sigmas],
    )


def check_image(job: JobSpec, model: sections.ModelSection) -> None:
    """A generate job of an image-to-video model needs ``workload.image``; a text-image-to-video
    model (Wan2.2 TI2V-5B) may take one; no other does."""
    w, name = job.workload, model.preset or "from model.weights"
    i2v = image_to_video(model)
    if w.kind == "generate" and i2v and not w.image:
        raise SporchError(f"the model ({name}) is image-to-video: set workload.image to the first frame's image file")
    if w.image and not (takes_image(model) and w.kind == "generate"):
        raise SporchError(f"workload.image is the first frame of an image-to-video generate job, but the model ({name}) "
                          f"is text-to-video or workload.kind is {w.kind}; remove it")


def check_expert_keys(job: JobSpec, model: sections.ModelSection) -> None:
    """``workload.guidance_scale_2`` and ``pipeline.experts`` only for a two-expert model."""
    if model.experts > 1:
        return
    name = model.preset or "from model.weights"
    if job.workload.guidance_scale_2 is not None:
        raise SporchError(f"workload.guidance_scale_2 is the low-noise expert's CFG scale, but the model ({name}) has "
                          "one transformer; remove it (two experts: Wan2.2 A14B)")
    if job.pipeline.experts != "auto":
        raise SporchError(f"pipeline.experts places two experts, but the model ({name}) has one transformer; "
                          "remove it (two experts: Wan2.2 A14B)")


def check_cache(job: JobSpec, model: sections.ModelSection) -> None:
    """MagCache needs the model's magnitude ratios (published, or measured by a run without them)."""
    c = job.workload.cache
    if c.method == "magcache" and c.ratios is None and c.threshold and published_magcache_ratios(model.preset) is None:
        raise SporchError(f"workload.cache.method=magcache needs the model's magnitude ratios, and none are published "
                          f"for {model.preset or 'this model'}: run once with workload.cache.threshold=0 (it measures "
                          "them: result.json step_cache.changes) and give them as workload.cache.ratios")


def check_quant(job: JobSpec, model: sections.ModelSection, cluster: sections.ClusterSpec,
                placement: sections.PlacementSection) -> None:
    """``model.quant``: float8 needs a GPU of compute capability 8.9+ (the cluster's GPU model
    says), and quantised weights are applied to whole tensors: not with sharded parameters."""
    quant = model.quant
    if quant == "none":
        return
    if quant in FP8_QUANT and not fp8_capable(cluster.gpu.model):
        raise SporchError(f"model.quant={quant} needs float8 matmuls (GPUs of compute capability 8.9+: L40S, H100, "
                          f"H200, B200), but {cluster.name}'s GPU is {cluster.gpu.model}: use model.quant=int8_weight "
                          "or none")
    if placement.shard_weights != "none":
        raise SporchError(f"model.quant={quant} is applied to whole weights after load, but the plan shards the "
                          f"parameters (parallel.shard_weights={placement.shard_weights}: {placement.reason or 'asked'}); "
                          "set parallel.shard_weights=none (quantised weights take a quarter to half the memory), "
                          "or model.quant=none")


def check_attention_precision(job: JobSpec, layout: Layout) -> None:
    """``workload.attention_precision: lossy`` runs SageAttention, whose kernel returns no
    log-sum-exp: a ring cannot merge its blocks."""
    if job.workload.attention_precision == "lossy" and layout.ring > 1:
        raise SporchError(f"workload.attention_precision=lossy runs SageAttention, which returns no log-sum-exp to "
                          f"merge the blocks of a ring, but the layout has ring {layout.ring}: set parallel.ring=1 "
                          "(Ulysses only) or workload.attention_precision=exact")


def cache_section(w: WorkloadSpec) -> Optional[sections.CacheSection]:
    c = w.cache
    if c.method == "none":
        return None
    return sections.CacheSection(method=c.method, threshold=float(c.threshold or 0.0), warmup_steps=int(c.warmup_steps),
                                 max_consecutive=int(c.max_consecutive), interval=int(c.interval or 0),
                                 order=int(c.order), ratios=None if c.ratios is None else [float(r) for r in c.ratios])


@dataclasses.dataclass(frozen=True)
class PlanBasis:
    """What every plan of one job on one cluster shares whatever its layout (``parallel``): the
    job's model resolved, the cluster section (its env and container in force), the job file's
    dict but its parallel section. Many layouts of a job (a campaign's, a search's) are planned
    from one (:func:`plan_basis`); each plan's ``job.spec`` shares its nested values (read only)."""

    model: sections.ModelSection
    cluster: sections.ClusterSpec
    spec: dict  # job.to_dict() without ``source`` and ``parallel``
    workload: sections.WorkloadSection
    seq_len: int
    grid: list
    cluster_warnings: tuple[str, ...]  # the descriptor's own (bandwidth_warnings)
    context: LayoutContext  # what the layout search checks a layout against
    parameters: dict  # estimates.parameter_parts(model): the DiT's parameters by FSDP unit kind


def plan_basis(cluster: sections.ClusterSpec, job: JobSpec,
               model: Optional[sections.ModelSection] = None) -> PlanBasis:
    """The :class:`PlanBasis` of ``job`` on ``cluster`` (its model resolved here unless given)."""
    model = model if model is not None else resolve_job_model(job)
    spec = {k: to_plain(getattr(job, f.name)) for f in dataclasses.fields(job) if (k := f.name) not in
            ("source", "parallel")}
    seq_len, grid = sequence_shape(model, job.workload)
    return PlanBasis(model=model, context=layout_context(cluster, job, model, seq_len),
                     cluster=dataclasses.replace(cluster, env=cluster.resolved_env(),
                                                 container=effective_container(cluster.container, job)),
                     spec=spec, workload=workload_section(job.workload, model, job.source), seq_len=seq_len, grid=grid,
                     cluster_warnings=tuple(bandwidth_warnings(cluster)), parameters=parameter_parts(model))


#: A job's dict's keys in order (JobSpec's fields but ``source``) and its parallel section's.
_SPEC_KEYS = tuple(f.name for f in dataclasses.fields(JobSpec) if f.name != "source")
_PARALLEL_KEYS = tuple(f.name for f in dataclasses.fields(ParallelSpec))


def job_section(cluster: sections.ClusterSpec, job: JobSpec, basis: Optional[PlanBasis] = None) -> sections.JobSection:
    if basis is not None:  # the same dict as job.to_dict() (key order too), from the shared part
        par = job.parallel  # plain values only (numbers, "auto", None): its fields as they are
        spec = {**basis.spec, "parallel": {k: getattr(par, k) for k in _PARALLEL_KEYS}}
        spec = {k: spec[k] for k in _SPEC_KEYS}
    else:
        spec = job.to_dict()
        spec.pop("source", None)
    return sections.JobSection(name=job.name, output_dir=job.output_dir, entrypoint=job.entrypoint,
                      time=job.resources.time or cluster.slurm.time, source=job.source or None, spec=spec,
                      preflight=bool(job.runtime.preflight),
                      collective_timeout=job.resources.collective_timeout)


def memory_advice(est: Estimates, memory_gib: float, gpu_model: str, placement: sections.PlacementSection,
                  layout: Layout) -> str:
    """Why a plan does not fit in GPU memory, and what would help: sharding the parameters
    (``parallel.shard_weights``) when they are not sharded over every rank yet, more
    ring/ulysses for the activations, more GPUs or bigger ones."""
    params, acts = est.memory.parameter_bytes_per_gpu, est.memory.activation_bytes_per_gpu
    where = "" if placement.shard_degree <= 1 else f" sharded over {placement.shard_degree} ranks"
    head = (f"estimated {est.memory.memory_bytes_per_gpu / GIB:.1f} GiB per GPU (parameters{where} {params / GIB:.1f} + "
            f"activations {acts / GIB:.1f}) exceeds 90% of the {memory_gib:g} GiB of a {gpu_model}")
    dtype = " or workload.dtype=bfloat16 (half the bytes of float32)" if est.compute.dtype_bytes > 2 else ""
    if placement.shard_degree < layout.world_size:
        return (f"{head}; set parallel.shard_weights=world (or auto) to spread the parameters over all "
                f"{layout.world_size} ranks, raise ring/ulysses (it splits the activations), lower the batch, "
                f"or use more or bigger GPUs{dtype}")
    if params > 0.9 * memory_gib * GIB:
        return (f"{head}; the parameters do not fit even sharded over all {layout.world_size} ranks: use more "
                f"GPUs (resources.nodes), GPUs with more memory, a smaller model{dtype}")
    return f"{head}; raise ring/ulysses (it splits the activations), lower the batch or use more or bigger GPUs"


def make_plan(cluster: sections.ClusterSpec, job: JobSpec, *, tables: bool = True,
              model: Optional[sections.ModelSection] = None, basis: Optional[PlanBasis] = None) -> Plan:
    """The Plan of ``job`` on ``cluster``. ``tables=False`` leaves out the per-rank table and the
    groups (empty): what ranking many candidate layouts needs, at a fraction of the cost.
    ``model``: the job's model already resolved (:func:`resolve_job_model`); without it, it is
    resolved here, once: the layout search reuses it. ``basis``: what the plans of ``job``'s
    layouts share (:func:`plan_basis` of this job and cluster but for ``job.parallel``), for many
    layouts of one job. Pure from there on."""
    if basis is None:
        basis = plan_basis(cluster, job, model)
    model = basis.model
    seq_len, grid = basis.seq_len, basis.grid
    ctx = basis.context
    chooser = FastestChooser(functools.partial(plan_with_layout, cluster, job, basis=basis))
    layout, warnings = resolve_layout(ctx, {d: getattr(job.parallel, d) for d in DIMS}, choose=chooser)
    warnings = [*basis.cluster_warnings, *warnings]
    sequence = sequence_section(seq_len, grid, layout, model)
    heads = heads_section(model, layout)
    workload = basis.workload
    cluster_s = basis.cluster

    generate = workload.kind == "generate"

    check_expert_keys(job, model)
    check_image(job, model)
    check_cache(job, model)
    check_family(job, model, layout)
    if layout.cfg > 1 and not cfg_on(model, job.workload):
        raise SporchError(f"parallel.cfg={layout.cfg} splits the two CFG passes, but CFG is off for this job "
                          f"({model.diffusers_class}, family {model.family}); set parallel.cfg=1")

    def estimate_for(degree: int, text_encoder: str, vae: str, experts: str) -> Estimates:
        est = estimate(model, workload, layout, sequence, heads, cluster_s, shard_degree=degree,
                       parts=basis.parameters)
        if not generate:
            return est
        return with_pipeline(with_experts(est, model, cluster_s, experts), model, workload, layout, text_encoder, vae)

    modes = {"shard_weights": job.parallel.shard_weights, "text_encoder": job.pipeline.text_encoder,
             "vae": job.pipeline.vae, "experts": job.pipeline.experts}
    choices = generate_placements(get_family(model.family), latent_rows(model, workload.height), layout.sequence_degree,
                                 folder_vae_refusal(model, get_family(model.family)))
    # the generate of a two-call CFG pipeline runs its cfg ranks' forwards at different times
    two_calls = generate and get_family(model.family).pipeline_cfg is PipelineCfg.TWO_CALLS
    placement, est = choose_placement(modes, layout, estimate_for, lockstep=not generate, cfg_lockstep=not two_calls,
                                      generate=generate, experts=model.experts > 1, choices=choices)
    check_quant(job, model, cluster, placement)
    check_attention_precision(job, layout)
    est = dataclasses.replace(est, weights=dataclasses.replace(est.weights, shard_weights=placement.shard_weights),
                              staging=staging_estimate(model, workload, cluster, ctx.nodes),
                              layout_choice=chooser.reason or None)
    if not est.memory.fits:
        warnings.append(memory_advice(est, cluster.gpu.memory_gib, cluster.gpu.model, placement, layout))
    comm = est.communication
    comm_s = comm.all_to_all_s_per_step_ideal + comm.ring_s_per_step_ideal
    if comm_s > est.compute.compute_s_per_step_ideal > 0:
        warnings.append(
            f"communication-bound: all-to-all {comm.all_to_all_s_per_step_ideal:.3g} s "
            f"({comm.all_to_all_gb_per_s:g} GB/s) + ring {comm.ring_s_per_step_ideal:.3g} s "
            f"({comm.ring_gb_per_s:g} GB/s) per step exceed ideal compute "
            f"{est.compute.compute_s_per_step_ideal:.3g} s on {cluster.name} "
            f"({cluster.intra_node.fabric} in a node, {cluster.inter_node.fabric} between nodes)"
        )
    return with_prediction(Plan(
        layout=layout,
        world_size=layout.world_size,
        nodes=ctx.nodes,
        gpus_per_node=cluster.gpus_per_node,
        ranks=Plan.rank_table(layout, cluster.gpus_per_node) if tables else (),
        groups=shared_groups(layout) if tables else {},
        cluster=cluster_s,
        job=job_section(cluster, job, basis),
        model=model,
        workload=workload,
        sequence=sequence,
        heads=heads,
        placement=placement,
        estimates=est,
        warnings=tuple(warnings),
    ))


@functools.lru_cache(maxsize=256)
def shared_groups(layout: Layout) -> dict[str, list[list[int]]]:
    """``layout.all_groups()``, made once per layout and shared by the plans of that layout (read
    only, as PlanBasis.spec is): a campaign's thousands of plans hold a few layouts' groups."""
    return layout.all_groups()


def plan_with_layout(cluster: sections.ClusterSpec, job: JobSpec, layout: Layout,
                     model: Optional[sections.ModelSection] = None, basis: Optional[PlanBasis] = None) -> Plan:
    """The Plan of ``job`` with its layout fixed to ``layout``, without the rank table and groups:
    what ranking compares (``model``: the job's model, resolved once for all candidates; ``basis``:
    all that the candidates share)."""
    parallel = dataclasses.replace(job.parallel, **layout.sizes())
    return make_plan(cluster, dataclasses.replace(job, parallel=parallel), tables=False, model=model, basis=basis)


def rank_feasible(cluster: sections.ClusterSpec, job: JobSpec) -> tuple[LayoutContext, list[Ranked]]:
    """The feasible layouts of ``job`` on ``cluster`` (whatever its parallel section asks; at most
    :data:`~sporch.orchestrator.plan.ranking.MAX_RANKED`, the most preferred), ranked."""
    basis = plan_basis(cluster, job)
    ctx = job_context(cluster, job, basis.model)
    feas = feasible_layouts(ctx)
    if not feas:
        raise LayoutError(feasible_text(ctx, feas), feas)
    return ctx, rank(functools.partial(plan_with_layout, cluster, job, basis=basis), most_preferred(ctx, feas))
