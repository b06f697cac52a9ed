"""The Plan's sections as frozen dataclasses: the typed contract both sides import.

Standard library only. Every key the runtime reads is a field here (tests/runtime/
test_plan_contract.py checks it); ``from_dict`` refuses unknown keys, so a plan and the code
reading it cannot drift apart silently. The cluster section is the cluster descriptor itself
(``clusters/*.yaml`` is loaded into these classes by :mod:`sporch.orchestrator.config.cluster`).
"""

from __future__ import annotations

import dataclasses
import typing
from dataclasses import dataclass, field
from typing import Any, Dict, List, Optional, TypeVar

from sporch.orchestrator.contract.parallel import head_split, kv_mode, padded_length, sequence_chunks
from sporch.orchestrator.contract.vocab import SEQUENCE_SPLITS
from sporch.orchestrator.contract.numbers import counted

T = TypeVar("T")


class Section:
    """JSON round trip for a (possibly nested) frozen dataclass."""

    def to_dict(self) -> Dict[str, Any]:
        return dataclasses.asdict(self)  # type: ignore[call-overload]

    @classmethod
    def from_dict(cls: type[T], data: Any) -> T:
        return build(cls, data, cls.__name__)


def build(cls: type, data: Any, where: str) -> Any:
    """``data`` (a dict from JSON) -> an instance of the dataclass ``cls``; nested dataclass
    fields (also Optional ones) are built too. Unknown keys raise ValueError."""
    if isinstance(data, cls):
        return data
    if not isinstance(data, dict):
        raise ValueError(f"{where} must be an object, got {type(data).__name__}")
    names = {f.name: f for f in dataclasses.fields(cls)}
    unknown = sorted(set(data) - set(names))
    if unknown:
        raise ValueError(f"{where}: unknown key(s) {', '.join(unknown)}; known: {', '.join(names)}")
    hints = typing.get_type_hints(cls)
    kw = {}
    for key, value in data.items():
        sub = dataclass_of(hints[key])
        kw[key] = build(sub, value, f"{where}.{key}") if sub is not None and value is not None else value
    return cls(**kw)


def dataclass_of(hint: Any) -> Optional[type]:
    """The dataclass ``hint`` names (also inside Optional), else None."""
    if dataclasses.is_dataclass(hint):
        return hint
    for arg in typing.get_args(hint):  # Optional[X]
        if dataclasses.is_dataclass(arg):
            return arg
    return None


# -- model, workload, sequence, heads, job ---------------------------------------------------------
@dataclass(frozen=True)
class ModelSection(Section):
    """The resolved model shape (preset + explicit fields), keys as in docs/contracts.md."""

    preset: Optional[str]
    attention: str  # vocab.ATTENTION_KINDS
    depth: int
    single_depth: int
    hidden: int
    num_heads: int
    num_kv_heads: int
    head_dim: int
    ffn_dim: int
    mlp_ratio: float
    patch: List[int]  # [pt, ph, pw]
    in_channels: int
    vae_stride: List[int]  # [st, sh, sw]
    text_len: int
    text_dim: int
    qk_norm: bool
    weights: Optional[str] = None  # a local checkpoint folder/file (sporch.orchestrator.models.checkpoint_files); None = seeded random weights
    # guidance-distilled (Flux.1): one transformer pass per step, no classifier-free-guidance
    # branch, so layout.cfg is 1; guidance_embed: guidance_scale is an embedded input.
    # None = not stated (the runtime keeps its published knobs for the preset)
    distilled: Optional[bool] = None
    guidance_embed: Optional[bool] = None
    # vocab.STAGE_MODES: ranks read ``weights`` where it is (shared), or from one verified copy
    # per node in the cluster's node_local_dir (node; runtime/stage.py)
    stage: str = "shared"
    # Wan2.2 A14B's two experts (docs/model.md, "Wan2.2"): ``transformer`` denoises the steps whose
    # timestep t >= boundary_ratio x the scheduler's num_train_timesteps, ``transformer_2`` the
    # rest (diffusers' WanPipeline rule). None: one transformer.
    boundary_ratio: Optional[float] = None
    # Wan2.2 TI2V-5B (model_index.json's expand_timesteps): one timestep per token; with
    # workload.image the given first frame's tokens stay the image's latents at timestep 0
    expand_timesteps: bool = False
    # LoRA adapters merged into the weights at load (docs/model.md, "LoRA adapters"):
    # [{"path": absolute .safetensors, "scale": float}]; None: none
    lora: Optional[List[Dict[str, Any]]] = None
    # The model family (models/families: "wan", "flux", "qwen-image", "ltx-video", ...), resolved
    # once by the planner from the preset, the checkpoint's config.json or the shape's attention kind
    family: Optional[str] = None
    # The diffusers transformer class every rank builds and runs sequence-parallel (runtime/models)
    diffusers_class: Optional[str] = None
    # Its config (config.json's keys): the checkpoint folder's (an original release's mapped to the
    # class's), or the preset's with the job's sizes; the runtime builds the class from it
    diffusers_config: Optional[Dict[str, Any]] = None
    # A pipeline folder's text encoders and VAE as its safetensors headers size them
    # (models/pipeline_sizes.py: classes, parameters, layers, largest embedding), read once by the
    # planner for the generate memory estimate; None: not a pipeline folder (the family's published
    # sizes apply for a preset, or none are known)
    pipeline_sizes: Optional[Dict[str, Any]] = None
    # vocab.QUANT_MODES: the blocks' linear weights quantised per rank after load (torchao;
    # docs/performance.md, "Low-bit weights"); "none": the workload dtype
    quant: str = "none"

    @property
    def experts(self) -> int:
        """Transformers the model denoises with: 2 with a boundary, else 1."""
        return 1 if self.boundary_ratio is None else 2


@dataclass(frozen=True)
class CacheSection(Section):
    """Step caching (docs/performance.md, "Step caching"): skip the blocks on steps whose
    input barely changed; the decision is reduced over the sequence and cfg groups."""

    method: str = "none"  # vocab.CACHE_METHODS
    threshold: float = 0.0  # relative L1 change (TeaCache: its rescaled sum) below which a step is skipped
    warmup_steps: int = 1  # the first steps are always computed (the last one too)
    max_consecutive: int = 0  # at most this many skipped steps in a row (0: no cap)
    # taylorseer: the blocks run every ``interval``-th step after the warm-up, the residual
    # predicted in between from a Taylor expansion of ``order``
    interval: int = 0
    order: int = 1
    # magcache: the magnitude ratio of each step's block residual to the last's (a calibration
    # run's step_cache.changes); None: the published ones for the preset, or measure only
    ratios: Optional[List[float]] = None


def compile_off_reason(option: Optional[bool], shard_weights: str, on_gpu: bool = True) -> Optional[str]:
    """The compile rule, for the cost model (a GPU) and the runtime (its device): None when the
    transformer blocks are compiled (sporch.runtime.compile), else why not. ``option``
    (``workload.compile``): true or false wins, unset compiles on a GPU only; never with the
    parameters sharded (fully_shard's hooks run in every block call: compiling them is not
    measured yet; docs/model.md)."""
    if option is False or (option is None and not on_gpu):
        return "off (workload.compile)"
    if shard_weights != "none":
        return "off: the parameters are sharded (parallel.shard_weights)"
    return None


@dataclass(frozen=True)
class WorkloadSection(Section):
    kind: str  # vocab.WORKLOAD_KINDS
    batch: int
    frames: Optional[int]
    height: Optional[int]
    width: Optional[int]
    seq_len: Optional[int]
    steps: int
    guidance_scale: float
    cfg_enabled: bool
    dtype: str  # vocab.DTYPES
    warmup: int
    repeat: int
    seed: int
    # flow-matching timestep shift: the sampler's (None = 1, no shift); for generate Wan's
    # flow_shift or Flux's fixed shift (None = the pipeline's own)
    shift: Optional[float] = None
    compile: Optional[bool] = None  # compile each block (sporch.runtime.compile); None = on for CUDA, off on CPU
    # generate (docs/generate.md); prompt_file is absolute in the plan
    prompt: Optional[str] = None
    prompt_file: Optional[str] = None
    negative_prompt: Optional[str] = None
    scheduler: Optional[str] = None  # vocab.SCHEDULERS; None = the pipeline folder's
    output_format: Optional[str] = None  # vocab.OUTPUT_FORMATS; None = mp4 for video models, png for images
    fps: int = 16
    tiny_weights: bool = False
    # the low-noise expert's CFG scale (two-expert models); None = guidance_scale (as WanPipeline)
    guidance_scale_2: Optional[float] = None
    # image-to-video: the first frame's image file (absolute in the plan); None for text-to-video
    image: Optional[str] = None
    cache: Optional[CacheSection] = None  # None: no step caching
    # vocab.ATTENTION_PRECISIONS: lossy lets the runtime run SageAttention where it can
    # (runtime/attention/select.py choose_for_precision); exact never
    attention_precision: str = "exact"
    # the steps' sigmas before the shift (a few-step recipe's timesteps / 1000); None: evenly spaced
    sigmas: Optional[List[float]] = None


@dataclass(frozen=True)
class SequenceSection(Section):
    seq_len: int  # latent tokens of one sample
    padded_len: int  # rounded up to a multiple of degree: what the attention runs over
    pad: int
    tokens_per_rank: int  # the longest rank's chunk
    grid: List[int]  # [f, h, w] token grid; [1, h, w] with h x w = seq_len, as square as it divides, from seq_len
    degree: int  # ring x ulysses
    #: vocab.SEQUENCE_SPLITS: "uneven" (cut unpadded by parallel.sequence_chunks; only the
    #: attention pads a shorter chunk to tokens_per_rank) or "padded" (an older plan's: every
    #: rank's layers ran tokens_per_rank tokens, the pad included; the runtime refuses it)
    split: str = "padded"
    #: text tokens cut over the sequence ranks with the image's (joint attention; a cross-attention
    #: whose split plan cuts the text); 0 where the text stays whole on every rank
    text_len: int = 0

    @classmethod
    def build(cls, seq_len: int, grid: List[int], degree: int, split: str = "padded",
              text_len: int = 0) -> "SequenceSection":
        """The section of ``seq_len`` tokens shared by ``degree`` (ring x ulysses) ranks: padded to a
        multiple of it (:func:`~sporch.orchestrator.contract.parallel.padded_length`)."""
        if split not in SEQUENCE_SPLITS:
            raise ValueError(f"sequence split {split!r}: one of {SEQUENCE_SPLITS}")
        padded = padded_length(seq_len, degree)
        return cls(seq_len=seq_len, padded_len=padded, pad=padded - seq_len, tokens_per_rank=padded // degree,
                   grid=list(grid), degree=degree, split=split, text_len=text_len)

    def chunks(self) -> List[int]:
        """Image/video tokens each sequence rank's per-token layers run (padding included on the
        padded split)."""
        if self.split == "uneven":
            return sequence_chunks(self.seq_len, self.degree)
        return [self.tokens_per_rank] * self.degree


@dataclass(frozen=True)
class HeadsSection(Section):
    num_heads: int
    num_kv_heads: int
    q_heads_per_rank: List[int]  # parallel.head_split(num_heads, ulysses)
    kv_mode: Optional[str]  # parallel.kv_mode
    even: bool

    @classmethod
    def build(cls, num_heads: int, num_kv_heads: int, ulysses: int) -> "HeadsSection":
        """The heads of a model split over ``ulysses`` ranks (:mod:`sporch.orchestrator.contract.parallel`)."""
        return cls(num_heads=num_heads, num_kv_heads=num_kv_heads, q_heads_per_rank=head_split(num_heads, ulysses),
                   kv_mode=kv_mode(num_heads, num_kv_heads, ulysses), even=num_heads % ulysses == 0)


@dataclass(frozen=True)
class JobSection(Section):
    name: str
    output_dir: str
    entrypoint: Optional[str]  # "pkg.module:function", None = the built-in workloads
    time: str  # Slurm time limit
    source: Optional[str]  # the job file
    spec: Dict[str, Any] = field(default_factory=dict)  # the job spec as loaded (for people, not read)
    preflight: bool = True  # runtime.preflight: every node checked before the weights load
    # resources.collective_timeout (seconds); None = the default (hangs.collective_timeout_s)
    collective_timeout: Optional[float] = None


@dataclass(frozen=True)
class PlacementSection(Section):
    """Where the DiT's parameters live (docs/plan.md, "Memory"). ``shard_weights``: none (every
    rank holds them all), sequence (sharded over each replica's ring x ulysses ranks) or world
    (over every rank), FSDP2 with one unit per block; ``shard_degree``: ranks one copy is
    spread over; ``reason``: why the planner chose it (``auto``). A generate job also places its
    text encoder and VAE (``pipeline.text_encoder``, ``pipeline.vae``; docs/generate.md)."""

    shard_weights: str = "none"  # vocab.SHARD_WEIGHTS
    shard_degree: int = 1
    reason: str = ""
    # generate only (absent in older plans = leader): vocab.TEXT_ENCODER_PLACEMENTS,
    # vocab.VAE_PLACEMENTS; ``pipeline_degree``: ranks a sharded text encoder or a parallel
    # decode is spread over (the leader's sequence group)
    text_encoder: str = "leader"
    vae: str = "leader"
    pipeline_degree: int = 1
    # two-expert models (model.boundary_ratio): vocab.EXPERT_PLACEMENTS: both experts on the GPU
    # (resident), or the idle one in host memory, moved in at the switch (offload)
    experts: str = "resident"


# -- cluster -------------------------------------------------------------------------------------
#: Environment exported in every job, before the fabric defaults and the cluster's own env.
COMMON_ENV: Dict[str, str] = {"TORCH_NCCL_ASYNC_ERROR_HANDLING": "1", "OMP_NUM_THREADS": "1"}
#: Per inter-node fabric defaults (the cluster's ``env`` wins over these).
FABRIC_ENV: Dict[str, Dict[str, str]] = {
    "infiniband": {"NCCL_IB_DISABLE": "0"},
    "roce": {"NCCL_IB_DISABLE": "0", "NCCL_IB_GID_INDEX": "3"},
    "ethernet": {"NCCL_IB_DISABLE": "1"},
}
#: Per intra-node fabric defaults.
INTRA_ENV: Dict[str, Dict[str, str]] = {"nvlink": {}, "pcie": {}}


@dataclass(frozen=True)
class GpuSpec(Section):
    model: str = "unknown"
    memory_gib: float = 80.0
    bf16_tflops: float = 100.0  # dense bf16 TFLOP/s
    # host <-> GPU copies, GB/s one direction (PCIe, NVLink-C2C); None: the planner's default
    # (plan/experts.py HOST_GB_PER_S)
    host_gb_per_s: Optional[float] = None


@dataclass(frozen=True)
class IntraNodeSpec(Section):
    fabric: str = "nvlink"  # nvlink | pcie
    gb_per_s: float = 300.0  # GB/s per GPU, one direction


@dataclass(frozen=True)
class InterNodeSpec(Section):
    fabric: str = "infiniband"  # infiniband | roce | ethernet
    gb_per_s: float = 100.0  # GB/s per node, one direction, all NICs together
    nics_per_node: int = 1


@dataclass(frozen=True)
class MeasuredLinksSpec(Section):
    """Which of the cluster's link figures a preflight measured (``sporch calibrate --links``):
    filled in by the descriptor's loader from its calibration file's ``links`` section, never
    written in a descriptor. The figures' values are where the plan reads them (``intra_node`` /
    ``inter_node.gb_per_s``, ``calibration_constants``); the figures not named here are the
    descriptor's rates and the cost model's latencies."""

    calibration: str  # the calibration file (absolute)
    preflight: str  # the preflight job's folder the figures were measured in
    measured_at: Optional[str]  # when the preflight finished, ISO 8601 UTC (None: a file that does not say)
    backend: str  # the preflight's process-group backend (nccl | gloo)
    figures: List[str]  # MEASURABLE_LINK_FIGURES measured and in force


#: The link figures a preflight can measure, in display order (rates in GB/s, latencies in s).
MEASURABLE_LINK_FIGURES = ("intra_node_gb_per_s", "inter_node_gb_per_s", "a2a_latency_s", "p2p_latency_s")


@dataclass(frozen=True)
class SlurmSpec(Section):
    partition: Optional[str] = None
    account: Optional[str] = None
    qos: Optional[str] = None
    constraint: Optional[str] = None
    time: str = "01:00:00"
    cpus_per_task: int = 8
    mem: Optional[str] = None
    exclusive: bool = True
    gpu_directive: str = "gpus-per-node"  # gpus-per-node | gres | gpus-per-task
    extra: List[str] = field(default_factory=list)  # extra sbatch options, e.g. "--reservation=x"
    max_array_size: Optional[int] = None  # Slurm's MaxArraySize; unset: asked of scontrol at submit


@dataclass(frozen=True)
class LoginSpec(Section):
    """How to reach the login host over ssh (docs/clusters.md); the user's ssh config fills in
    what is not given here (sporch.orchestrator.remote.route)."""

    host: str = "localhost"  # a host name, or a Host alias of the ssh config
    port: Optional[int] = None  # None: ssh config's Port, else 22
    user: Optional[str] = None
    identity_file: Optional[str] = None
    workdir: str = "~/sporch"
    setup: List[str] = field(default_factory=list)  # run on the login node before sbatch
    known_hosts: Optional[str] = None  # extra known_hosts file (~/.ssh/known_hosts is always read)
    host_key_policy: str = "reject"  # vocab.HOST_KEY_POLICIES
    # jump hosts, "[user@]host[:port]" each, in order (the loader splits a comma-separated string);
    # None: ssh config's ProxyJump; ["none"]: none at all
    proxy_jump: Optional[List[str]] = None
    ssh_config: Optional[str] = None  # OpenSSH client config; None: $SPORCH_SSH_CONFIG, else ~/.ssh/config


@dataclass(frozen=True)
class ContainerSpec(Section):
    """The container every rank runs in (docs/clusters.md, "container"): a cluster's
    ``container`` section, which a job's own ``container`` section may change key by key."""

    runtime: str = ""  # vocab.CONTAINER_RUNTIMES
    # pyxis: an enroot image or .sqsh; apptainer: a .sif or sandbox; podman: an image, or a root
    # file system folder (an absolute path)
    image: str = ""
    # "SRC:DST" or "SRC:DST:ro|rw"; the job's folder is always mounted at its own path
    mounts: List[str] = field(default_factory=list)
    workdir: Optional[str] = None  # the ranks' working directory inside; None: the runtime's default
    env: Dict[str, str] = field(default_factory=dict)  # set inside the container (over the image's own)
    python: str = "python"  # the interpreter inside the container (not the cluster's ``python``)
    gpus: bool = True  # apptainer --nv, podman --device nvidia.com/gpu=all (pyxis: enroot's hooks)
    options: List[str] = field(default_factory=list)  # more arguments: srun's (pyxis), exec's or run's


@dataclass(frozen=True)
class ClusterSpec(Section):
    name: str = ""
    description: str = ""
    nodes: int = 1
    gpus_per_node: int = 8
    gpu: GpuSpec = field(default_factory=GpuSpec)
    intra_node: IntraNodeSpec = field(default_factory=IntraNodeSpec)
    inter_node: InterNodeSpec = field(default_factory=InterNodeSpec)
    slurm: SlurmSpec = field(default_factory=SlurmSpec)
    env: Dict[str, str] = field(default_factory=dict)
    env_defaults: bool = True  # add COMMON_ENV and the per-fabric defaults
    setup: List[str] = field(default_factory=list)  # batch-script lines before srun
    python: str = "python"
    login: Optional[LoginSpec] = None
    # Cost-model calibration (docs/plan.md): a file written by `sporch calibrate` (relative to
    # this descriptor), whose constants the loader copies into calibration_constants; constants
    # given inline win over the file's.
    calibration: Optional[str] = None
    calibration_constants: Dict[str, float] = field(default_factory=dict)
    # The link figures the calibration file's preflight measured (filled in by the loader; None:
    # every link figure is the descriptor's, every latency the cost model's).
    measured_links: Optional[MeasuredLinksSpec] = None
    # Weights staged per node (model.stage: node; runtime/stage.py): the node-local folder
    # ("{node}" = the node's name), what happens to the copy at the job's end (keep | end), and
    # the shared file system's read bandwidth (GB/s, all nodes together) for the plan's estimate.
    node_local_dir: str = "/tmp/sporch-stage"
    stage_cleanup: str = "keep"
    shared_fs_gb_per_s: float = 2.0
    # The container every rank runs in (None: on the node's own software); a job may change it
    # (its ``container`` section) -- the Plan's cluster section holds the one in force.
    container: Optional[ContainerSpec] = None
    source: str = ""  # file it was loaded from (filled in by the loader)

    @property
    def world_size(self) -> int:
        return self.nodes * self.gpus_per_node

    def resolved_env(self) -> Dict[str, str]:
        """Environment exported in the batch script: defaults, then the cluster's env."""
        env: Dict[str, str] = {}
        if self.env_defaults:
            env.update(COMMON_ENV)
            env.update(INTRA_ENV.get(self.intra_node.fabric, {}))
            env.update(FABRIC_ENV.get(self.inter_node.fabric, {}))
        env.update(self.env)
        return env

    def to_dict(self) -> Dict[str, Any]:
        d = dataclasses.asdict(self)
        d["env"] = self.resolved_env()
        return d

    def summary(self) -> str:
        return f"{counted(self.nodes, 'node')} x {counted(self.gpus_per_node, 'GPU')} = {self.world_size}"
