"""The typed records of a job file (``job.yaml``): :class:`JobSpec` and its sections.

Sections: ``model`` (ModelSpec), ``workload`` (WorkloadSpec), ``parallel`` (ParallelSpec),
``pipeline`` (PipelineSpec: generate's text encoder and VAE), ``runtime`` (RuntimeSpec),
``resources`` (ResourcesSpec), ``container`` (JobContainerSpec: changes the cluster's container),
plus ``name``, ``output_dir`` and ``entrypoint``.
The key names are the public interface (docs/jobs.md). Loading is in :mod:`.job`, the checks in
:mod:`.job_checks`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Dict, List, Optional, Union

from sporch.orchestrator.config.loading import to_plain
from sporch.orchestrator.contract.sections import CacheSection


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
