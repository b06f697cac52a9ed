"""Job specs (``job.yaml``): typed sections, loading with overrides, validation.

Sections: ``model`` (ModelSpec), ``workload`` (WorkloadSpec), ``parallel`` (ParallelSpec),
``pipeline`` (PipelineSpec: generate's text encoder and VAE), ``runtime`` (RuntimeSpec),
``resources`` (ResourcesSpec), ``container`` (JobContainerSpec: changes the cluster's container),
plus ``name``, ``output_dir`` and ``entrypoint``.
The key names are the public interface (docs/jobs.md).
"""

from __future__ import annotations

import dataclasses
import math
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Dict, List, Optional, Sequence, Union

from sporch.orchestrator.config.loading import parse_overrides, plain_typed, read_plain, read_yaml, to_plain, to_typed
from sporch.orchestrator.errors import SporchError
from sporch.orchestrator.slurm.container import check_container
from sporch.orchestrator.slurm.directives import check_directive_path
from sporch.orchestrator.contract.durations import is_valid_time, time_seconds, TIME_FORMS
from sporch.orchestrator.contract.parallel import DIMS
from sporch.orchestrator.contract.sections import CacheSection, ContainerSpec
from sporch.orchestrator.contract.vocab import (ATTENTION_PRECISIONS, CACHE_METHODS, CONTAINER_RUNTIMES, DTYPES, EXPERT_PLACEMENTS,
                                               LORA_EXPERTS, MAX_NAME, OUTPUT_FORMATS, QUANT_MODES, SCHEDULERS, SHARD_WEIGHTS, STAGE_MODES,
                                               TEXT_ENCODER_PLACEMENTS, VAE_PLACEMENTS, WORKLOAD_KINDS)

#: Frames per second a generated video may have (docs/jobs.md).
FPS_RANGE = (1, 240)


@dataclass
class LoraSpec:
    path: Optional[str] = None  # a LoRA .safetensors (diffusers/PEFT or kohya keys); relative: to the job file's folder
    scale: Any = 1.0  # diffusers' lora_scale: W += scale * (alpha/rank) * up @ down
    expert: str = "both"  # two experts (Wan2.2 A14B): both | transformer (high noise) | transformer_2 (low noise)


@dataclass
class ModelSpec:
    preset: Optional[str] = None
    attention: Optional[str] = None  # cross | joint | self
    depth: Optional[int] = None
    single_depth: Optional[int] = None
    hidden: Optional[int] = None
    num_heads: Optional[int] = None
    num_kv_heads: Optional[int] = None
    head_dim: Optional[int] = None
    mlp_ratio: Optional[float] = None
    ffn_dim: Optional[int] = None
    patch: Any = None  # int p -> [1, p, p], or [pt, ph, pw]
    in_channels: Optional[int] = None
    vae_stride: Any = None  # [st, sh, sw]: the VAE's temporal, height and width strides
    text_len: Optional[int] = None
    text_dim: Optional[int] = None
    qk_norm: Optional[bool] = None
    weights: Optional[str] = None  # local checkpoint folder/file (original or diffusers layout; default: seeded random)
    stage: str = "shared"  # shared | node: load weights where they are, or from one verified copy per node
    lora: Optional[List[LoraSpec]] = None  # adapters merged into the weights at load (docs/model.md)
    quant: str = "none"  # none | int8_weight | fp8_weight | fp8_dynamic: low-bit block weights (torchao)


@dataclass
class CacheSpec:
    """``workload.cache``: step caching (docs/performance.md, "Step caching")."""

    method: str = "none"  # none | fbcache | teacache | taylorseer | magcache
    threshold: Optional[float] = None  # required for fbcache/teacache/magcache
    warmup_steps: int = CacheSection.warmup_steps  # the defaults are the Plan section's, written once there
    max_consecutive: int = CacheSection.max_consecutive
    interval: Optional[int] = None  # taylorseer (required): blocks computed every interval-th step
    order: int = CacheSection.order  # taylorseer: Taylor expansion order (1 or 2)
    ratios: Optional[List[float]] = None  # magcache: per-step magnitude ratios (a calibration run's changes)


@dataclass
class WorkloadSpec:
    kind: str = "inference"  # inference | benchmark | verify
    batch: int = 1
    frames: Optional[int] = None
    height: Optional[int] = None
    width: Optional[int] = None
    seq_len: Optional[int] = None
    steps: int = 50
    guidance_scale: float = 1.0  # CFG on when > 1
    dtype: str = "bfloat16"
    warmup: int = 1
    repeat: int = 3
    seed: int = 0
    # flow-matching timestep shift: the sampler's for inference/benchmark (unset = 1, no shift);
    # for generate Wan's flow_shift, or Flux's fixed shift instead of the resolution-dependent mu
    shift: Optional[float] = None
    compile: Optional[bool] = None  # torch.compile each block; unset = on for CUDA, off on CPU
    # -- generate (docs/generate.md) --------------------------------------------------------
    prompt: Optional[str] = None
    prompt_file: Optional[str] = None  # one prompt per line; relative to the job file's folder
    negative_prompt: Optional[str] = None  # Wan2.1 CFG; default "" (as WanPipeline)
    scheduler: Optional[str] = None  # unipc | euler; default: the pipeline folder's scheduler/
    output_format: Optional[str] = None  # mp4 | png; default: mp4 for Wan2.1, png for Flux.1
    fps: int = 16
    tiny_weights: bool = False  # create a tiny random pipeline at model.weights if it is missing
    # two-expert models (Wan2.2 A14B): the low-noise expert's CFG scale; unset = guidance_scale
    guidance_scale_2: Optional[float] = None
    # image-to-video (Wan2.2 I2V A14B): the first frame, an image file; relative to the job file's folder
    image: Optional[str] = None
    cache: CacheSpec = field(default_factory=CacheSpec)  # step caching (generate, inference)
    attention_precision: str = "exact"  # exact | lossy: 8-bit attention kernels (SageAttention) allowed
    sigmas: Optional[List[float]] = None  # one per step, before the shift: a recipe's timesteps / 1000


@dataclass
class ParallelSpec:
    dp: Optional[Union[int, str]] = None  # int, "auto", or unset (default)
    cfg: Optional[Union[int, str]] = None
    ring: Optional[Union[int, str]] = None
    ulysses: Optional[Union[int, str]] = None
    #: none | sequence | world (vocab.SHARD_WEIGHTS), or auto: shard only when the plain plan
    #: does not fit in GPU memory (the planner says which it chose and why).
    shard_weights: str = "auto"


@dataclass
class PipelineSpec:
    """Where a generate job's text encoder and VAE run (docs/generate.md, "Memory")."""

    #: leader | sharded | cpu (vocab.TEXT_ENCODER_PLACEMENTS), or auto: off the leader's GPU
    #: only when the plain plan does not fit.
    text_encoder: str = "auto"
    #: leader | tiled | parallel (vocab.VAE_PLACEMENTS), or auto: likewise.
    vae: str = "auto"
    #: two-expert models (Wan2.2 A14B): resident | offload (vocab.EXPERT_PLACEMENTS), or auto:
    #: both on the GPU when they fit, else the idle one in host memory.
    experts: str = "auto"


@dataclass
class RuntimeSpec:
    """What every rank does besides the workload (docs/troubleshooting.md)."""

    #: check every node (GPUs, versions, weights path) before loading weights; off skips it
    preflight: bool = True


@dataclass
class ResourcesSpec:
    time: Optional[str] = None  # Slurm time limit; default: the cluster's slurm.time
    nodes: Optional[int] = None  # default: the cluster's node count
    # seconds a collective may take before the watchdog names the ranks that never arrived and
    # ends the job (docs/troubleshooting.md); default: 300, or a quarter of the time limit
    collective_timeout: Optional[float] = None


#: ``container.runtime`` of a job that runs without its cluster's container.
NO_CONTAINER = "none"


@dataclass
class JobContainerSpec:
    """A job's ``container`` section: each key given replaces the cluster's (ContainerSpec);
    unset keys keep the cluster's. ``runtime: none`` runs the job without a container."""

    runtime: Optional[str] = None  # pyxis | apptainer | singularity | podman | none
    image: Optional[str] = None
    mounts: Optional[List[str]] = None
    workdir: Optional[str] = None
    env: Optional[Dict[str, str]] = None
    python: Optional[str] = None
    gpus: Optional[bool] = None
    options: Optional[List[str]] = None


@dataclass
class JobSpec:
    name: str = ""
    output_dir: str = "runs"
    entrypoint: Optional[str] = None  # "pkg.module:function" (default: the built-in runner)
    model: ModelSpec = field(default_factory=ModelSpec)
    workload: WorkloadSpec = field(default_factory=WorkloadSpec)
    parallel: ParallelSpec = field(default_factory=ParallelSpec)
    pipeline: PipelineSpec = field(default_factory=PipelineSpec)
    runtime: RuntimeSpec = field(default_factory=RuntimeSpec)
    resources: ResourcesSpec = field(default_factory=ResourcesSpec)
    container: Optional[JobContainerSpec] = None  # changes the cluster's container (docs/jobs.md)
    source: str = ""  # file it was loaded from

    def to_dict(self) -> dict[str, Any]:
        return to_plain(self)


# -- loading --------------------------------------------------------------------------
def job_relative(path: Optional[str], source: Optional[str]) -> Optional[str]:
    """A relative file path of the job (``workload.prompt_file``, ``workload.image``,
    ``model.lora[].path``) is relative to the job file's folder (``source``, the job file)."""
    if path and source and not Path(path).expanduser().is_absolute():
        return str(Path(source).parent / path)
    return path


def load_job(path: str | Path, overrides: Sequence[str] = ()) -> JobSpec:
    """Read ``path``, apply dotlist ``overrides`` (``parallel.ring=2``), type-check, validate."""
    p = Path(path)
    job = (None if overrides else plain_job(p)) or omegaconf_job(p, overrides)
    job.source = str(p.resolve())
    return validate_job(job, str(p))


def omegaconf_job(p: Path, overrides: Sequence[str] = ()) -> JobSpec:
    """The job file ``p`` with ``overrides``, typed by OmegaConf. Not validated yet."""
    cfg = read_yaml(p)
    if "name" not in cfg:
        cfg["name"] = p.stem
    layers = [(cfg, str(p))]
    if overrides:
        layers.append((parse_overrides(overrides), "command-line override"))
    return to_typed(JobSpec, layers)


def plain_job(p: Path) -> Optional[JobSpec]:
    """The job file ``p`` typed without OmegaConf (config/loading.py, "the plain path"), or None
    where OmegaConf must read it. Not validated yet."""
    data = read_plain(p)
    if data is None:
        return None
    data.setdefault("name", p.stem)
    return plain_typed(JobSpec, data, str(p))


def job_from_dict(data: dict[str, Any], source: str = "<dict>") -> JobSpec:
    """Typed JobSpec from a plain dict (tests, programmatic use)."""
    from omegaconf import OmegaConf

    cfg = OmegaConf.create(dict(data))
    if "name" not in cfg:
        cfg["name"] = "job"
    return validate_job(to_typed(JobSpec, [(cfg, source)]), source)


#: The largest ``model.lora[].scale`` either way (W += scale x alpha/rank x up @ down: 1e308 overflows).
MAX_LORA_SCALE = 100.0


def lora_problem(model: ModelSpec) -> Optional[tuple[str, str]]:
    """(key, why) when ``model.lora`` is wrong; the files themselves are read by the planner."""
    for i, entry in enumerate(model.lora or []):
        key = f"model.lora[{i}]"
        if not entry.path or not str(entry.path).strip():
            return f"{key}.path", "is missing; give the adapter's .safetensors file ({path: x.safetensors, scale: 1.0})"
        scale = entry.scale
        if isinstance(scale, bool) or not isinstance(scale, (int, float)) or not math.isfinite(scale):
            return f"{key}.scale", f"must be a number (diffusers' lora_scale, e.g. 1.0), got {scale!r}"
        if abs(scale) > MAX_LORA_SCALE:
            return f"{key}.scale", (f"{scale!r} is out of range: at most {MAX_LORA_SCALE:g} either way (diffusers' "
                                    "lora_scale, usually between 0 and 2)")
        if entry.expert not in LORA_EXPERTS:
            return f"{key}.expert", f"must be one of {', '.join(LORA_EXPERTS)}, got {entry.expert!r}"
    if model.lora and not (model.weights or model.preset):
        return "model.lora", ("needs the model it adapts: set model.weights (a checkpoint) or model.preset; "
                              "a LoRA on a model of made-up shape has nothing to match")
    return None


def vae_stride_problem(value: Any) -> Optional[str]:
    """Why ``model.vae_stride`` is wrong (None when it is three positive ints or unset). The
    planner reads it as [temporal, height, width]; a shorter list would drop the time stride."""
    if value is None:
        return None
    ints = isinstance(value, (list, tuple)) and all(isinstance(s, int) and not isinstance(s, bool) for s in value)
    if ints and len(value) == 3 and min(value) >= 1:
        return None
    return ("must be three positive ints [temporal, height, width], e.g. [4, 8, 8] for a video VAE or "
            f"[1, 8, 8] for an image VAE; got {value!r}")


def _validate_cache(w: WorkloadSpec, bad) -> None:
    c = w.cache
    if c.method not in CACHE_METHODS:
        raise bad("workload.cache.method", f"must be one of {', '.join(CACHE_METHODS)}, got {c.method!r}")
    if c.method == "none":
        return
    if w.kind not in ("generate", "inference"):
        raise bad("workload.cache", f"skips denoising steps, which {w.kind} does not run: use workload.kind "
                  "generate or inference, or workload.cache.method=none")
    if c.method == "taylorseer":
        if c.interval is None or isinstance(c.interval, bool) or c.interval < 2:
            raise bad("workload.cache.interval", f"taylorseer computes the blocks every interval-th step: give an "
                      f"integer >= 2 (e.g. 3), got {c.interval!r}")
        if c.order not in (1, 2):
            raise bad("workload.cache.order", f"must be 1 or 2 (the Taylor expansion's order), got {c.order!r}")
        if c.threshold is not None:
            raise bad("workload.cache.threshold", "is not used by taylorseer (its schedule is workload.cache.interval); "
                      "remove it")
    else:
        for key in ("interval", "ratios") if c.method != "magcache" else ("interval",):
            if getattr(c, key) is not None:
                raise bad(f"workload.cache.{key}", f"is not used by {c.method}; remove it")
    if c.method == "magcache" and c.ratios is not None:
        if not c.ratios or not all(isinstance(r, (int, float)) and not isinstance(r, bool) and math.isfinite(r)
                                   and r > 0 for r in c.ratios):
            raise bad("workload.cache.ratios", "must be a list of positive numbers, one per step (a magcache run's "
                      "result.json step_cache.changes)")
    if c.threshold is None and c.method != "taylorseer":
        raise bad("workload.cache.threshold", f"is required with method {c.method}: the relative change below which "
                  "a step is skipped (e.g. 0.1)")
    if c.threshold is not None and c.threshold < 0:
        raise bad("workload.cache.threshold", f"must be >= 0 (0: never skip), got {c.threshold}")
    if c.warmup_steps < 0:
        raise bad("workload.cache.warmup_steps", f"must be >= 0, got {c.warmup_steps}")
    if c.max_consecutive < 0:
        raise bad("workload.cache.max_consecutive", f"must be >= 0 (0: no cap), got {c.max_consecutive}")


def validate_job(job: JobSpec, source: str) -> JobSpec:
    def bad(key: str, msg: str) -> SporchError:
        return SporchError(f"{source}: '{key}' {msg}")

    if not re.fullmatch(r"[A-Za-z0-9_.\-]+", job.name or ""):
        raise bad("name", f"must be letters, digits, '-', '_' or '.', got {job.name!r}")
    if set(job.name) == {"."}:
        raise bad("name", f"{job.name!r} is not a folder name of its own; use letters or digits")
    if len(job.name) > MAX_NAME:
        raise bad("name", f"is {len(job.name)} characters long; use at most {MAX_NAME}")
    check_directive_path(f"{source}: 'output_dir'", job.output_dir)
    if job.entrypoint is not None and not re.fullmatch(r"[\w.]+(:[\w.]+)?", job.entrypoint):
        raise bad("entrypoint", f"must look like 'pkg.module:function', got {job.entrypoint!r}")
    if job.model.stage not in STAGE_MODES:
        raise bad("model.stage", f"must be one of {', '.join(STAGE_MODES)}, got {job.model.stage!r}")
    if job.model.stage == "node" and not job.model.weights:
        raise bad("model.stage", "node stages model.weights on each node, but the job has no model.weights: "
                  "set model.weights (a checkpoint folder or file) or model.stage=shared")
    if job.model.quant not in QUANT_MODES:
        raise bad("model.quant", f"must be one of {', '.join(QUANT_MODES)}, got {job.model.quant!r}")
    problem = lora_problem(job.model)
    if problem:
        raise bad(*problem)
    problem = vae_stride_problem(job.model.vae_stride)
    if problem:
        raise bad("model.vae_stride", problem)
    w = job.workload
    if w.kind not in WORKLOAD_KINDS:
        raise bad("workload.kind", f"must be one of {', '.join(WORKLOAD_KINDS)}, got {w.kind!r}")
    if w.dtype not in DTYPES:
        raise bad("workload.dtype", f"must be one of {', '.join(DTYPES)}, got {w.dtype!r}")
    for key, low in (("batch", 1), ("steps", 1), ("warmup", 0), ("repeat", 1)):
        if getattr(w, key) < low:
            raise bad(f"workload.{key}", f"must be >= {low}, got {getattr(w, key)}")
    for key in ("frames", "height", "width", "seq_len"):
        v = getattr(w, key)
        if v is not None and v < 1:
            raise bad(f"workload.{key}", f"must be >= 1, got {v}")
    low, high = FPS_RANGE
    if not low <= w.fps <= high:
        raise bad("workload.fps", f"must be {low}..{high} frames per second, got {w.fps}")
    if w.prompt is not None and not str(w.prompt).strip():
        raise bad("workload.prompt", "is empty; give the text to generate from (or workload.prompt_file)")
    if w.shift is not None and w.shift <= 0:
        raise bad("workload.shift", f"must be > 0, got {w.shift}")
    _validate_generate(w, bad)
    _validate_cache(w, bad)
    if w.sigmas is not None:
        s = list(w.sigmas)
        numbers = all(isinstance(x, (int, float)) and not isinstance(x, bool) and 0 < x <= 1 for x in s)
        if not numbers or len(s) != w.steps or any(a <= b for a, b in zip(s, s[1:])):
            raise bad("workload.sigmas", f"must be workload.steps ({w.steps}) decreasing numbers in (0, 1], one per "
                      f"step before the shift (e.g. [1.0, 0.75, 0.5, 0.25] for 4 steps), got {w.sigmas!r}")
        if w.kind == "generate" and w.scheduler != "euler":
            raise bad("workload.sigmas", "sets the Euler scheduler's sigmas: add workload.scheduler=euler")
    if w.attention_precision not in ATTENTION_PRECISIONS:
        raise bad("workload.attention_precision", f"must be one of {', '.join(ATTENTION_PRECISIONS)}, "
                  f"got {w.attention_precision!r}")
    if w.guidance_scale < 0:
        raise bad("workload.guidance_scale", f"must be >= 0, got {w.guidance_scale}")
    if w.guidance_scale_2 is not None and w.guidance_scale_2 < 0:
        raise bad("workload.guidance_scale_2", f"must be >= 0, got {w.guidance_scale_2}")
    has_shape = any(getattr(w, k) is not None for k in ("height", "width"))
    if w.seq_len is not None and (has_shape or w.frames is not None):
        raise bad("workload.seq_len", "conflicts with frames/height/width; give either seq_len or the video shape")
    if w.seq_len is None and not (w.height is not None and w.width is not None):
        raise bad("workload", "needs height and width (and frames for video), or seq_len")
    for dim in DIMS:
        v = getattr(job.parallel, dim)
        if v is None or v == "auto":
            continue
        if isinstance(v, str):
            if v.strip().isdigit():
                v = int(v)
                setattr(job.parallel, dim, v)
            else:
                raise bad(f"parallel.{dim}", f"must be a positive integer or 'auto', got {v!r}")
        if v < 1:
            raise bad(f"parallel.{dim}", f"must be a positive integer or 'auto', got {v}")
    if job.parallel.shard_weights not in (*SHARD_WEIGHTS, "auto"):
        raise bad("parallel.shard_weights", f"must be one of {', '.join(SHARD_WEIGHTS)} or auto, "
                  f"got {job.parallel.shard_weights!r}")
    _validate_pipeline(job, bad)
    r = job.resources
    if r.nodes is not None and r.nodes < 1:
        raise bad("resources.nodes", f"must be >= 1, got {r.nodes}")
    if r.time is not None and not is_valid_time(str(r.time)):
        raise bad("resources.time", f"{r.time!r} is not a Slurm time ({TIME_FORMS})")
    if r.collective_timeout is not None:
        if not r.collective_timeout > 0:
            raise bad("resources.collective_timeout", f"must be a number of seconds > 0, got {r.collective_timeout}")
        limit = time_seconds(str(r.time)) if r.time is not None else None
        if limit is not None and r.collective_timeout >= limit:
            raise bad("resources.collective_timeout", f"{r.collective_timeout:g} s is not below the time limit "
                      f"resources.time={r.time} ({limit} s); the stacks must be written before Slurm ends the job")
    _validate_container(job, source, bad)
    return job


def _given(spec: JobContainerSpec) -> dict[str, Any]:
    return {f.name: getattr(spec, f.name) for f in dataclasses.fields(spec) if getattr(spec, f.name) is not None}


def _validate_container(job: JobSpec, source: str, bad) -> None:
    """The keys a job's ``container`` section gives, each checked as the cluster's would be (the
    whole container, the cluster's merged with the job's, is checked again when planning)."""
    if job.container is None:
        return
    given = _given(job.container)
    runtime = given.get("runtime")
    if runtime is not None and runtime not in (*CONTAINER_RUNTIMES, NO_CONTAINER):
        raise bad("container.runtime", f"must be one of {', '.join(CONTAINER_RUNTIMES)} or {NO_CONTAINER} "
                  f"(without the cluster's container), got {runtime!r}")
    if runtime == NO_CONTAINER:
        return
    # the image and runtime may come from the cluster: stand-ins where the job gives none
    check_container(ContainerSpec(**{"runtime": "podman", "image": "image", **given}), source)


def effective_container(cluster_container: Optional[ContainerSpec], job: JobSpec) -> Optional[ContainerSpec]:
    """The container a job runs in: the cluster's, with the keys of the job's ``container``
    section in place of the cluster's (``runtime: none``: no container). A job on a cluster
    without one gives at least ``runtime`` and ``image``."""
    if job.container is None:
        return cluster_container
    given = _given(job.container)
    if given.get("runtime") == NO_CONTAINER:
        return None
    where = job.source or "job"
    if cluster_container is None:
        missing = [k for k in ("runtime", "image") if not given.get(k)]
        if missing:
            raise SporchError(f"{where}: 'container' needs {' and '.join(missing)}: the cluster has no container "
                              "to take them from (docs/clusters.md, \"container\")")
        base = ContainerSpec()
    else:
        base = cluster_container
    given = {k: (list(v) if isinstance(v, (list, tuple)) else dict(v) if isinstance(v, dict) else v)
             for k, v in given.items()}
    return check_container(dataclasses.replace(base, **given), where)


def _validate_pipeline(job: JobSpec, bad) -> None:
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


def _validate_generate(w: WorkloadSpec, bad) -> None:
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
