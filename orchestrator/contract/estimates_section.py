"""The Plan's ``estimates`` section: the planner's back-of-envelope numbers, as frozen records.

Standard library only. The planner writes it (plan/estimates.py for the DiT, plan/placement.py,
plan/pipeline.py, plan/experts.py and plan/staging.py add to it, plan/plan_prediction.py adds
``predicted``); everything else reads it by attribute: ``plan.estimates.memory.fits``,
``plan.estimates.predicted.step_s``. docs/plan.md says what each number means.

In plan.json the section keeps the keys it has always had: the fields of the four groups
:class:`ComputeEstimate`, :class:`CommunicationEstimate`, :class:`WeightsEstimate` and
:class:`MemoryEstimate` sit flat in the ``estimates`` object (a field's name is its JSON key; the
names are unique across the groups); ``pipeline``, ``experts``, ``staging`` and ``predicted`` are
nested objects and ``layout_choice`` a string, each left out when the plan has none. A field whose
default is None (or empty) is left out while it holds that default. Unknown keys are refused, as
in every other section.
"""

from __future__ import annotations

import dataclasses
import typing
from dataclasses import dataclass
from typing import Any, Optional

from sporch.orchestrator.contract.sections import dataclass_of



class Record:
    """A frozen record of the section: ``to_dict`` is its plan.json object."""

    def to_dict(self) -> dict[str, Any]:
        return _plain(self)


# -- the DiT's own numbers (plan/estimates.py), flat in plan.json ------------------------------------
@dataclass(frozen=True)
class ComputeEstimate(Record):
    """What one rank pushes through the DiT per step, and its FLOPs."""

    dtype_bytes: int
    samples_per_rank: int  # batch / dp, x2 with CFG on and cfg = 1
    tokens_per_rank: int  # image/video tokens before the all-to-all
    text_tokens_per_rank: int  # joint attention's text tokens (0 otherwise)
    attention_calls_per_step: int  # layers
    parameters: int
    token_parameters: int  # what a token's GEMM FLOPs are 2x of
    context_flops_per_sample: int  # cross-attention keys and values over the text, on every rank
    flops_per_step_per_rank: float
    compute_s_per_step_ideal: float


@dataclass(frozen=True)
class CommunicationEstimate(Record):
    """The sequence-parallel traffic per rank and its ideal time at the cluster's nominal rates."""

    all_to_all_bytes_per_rank: int  # per layer
    ring_bytes_per_rank: int  # per layer, all R - 1 transfers
    comm_bytes_per_rank_per_step: int
    all_to_all_gb_per_s: float
    ring_gb_per_s: float
    all_to_all_s_per_step_ideal: float
    ring_s_per_step_ideal: float


@dataclass(frozen=True)
class WeightsEstimate(Record):
    """The DiT's parameter bytes, how they are sharded, and what gathering them costs per step."""

    parameter_bytes_full: int
    weight_quant: str
    shard_degree: int
    parameter_bytes_sharded: int
    parameter_bytes_gathered: int
    weight_gather_bytes_per_rank_per_step: int
    weight_gather_gb_per_s: float
    weight_gather_s_per_step_ideal: float
    shard_weights: str = "none"  # the placement's parallel.shard_weights (the planner fills it in)


@dataclass(frozen=True)
class MemoryOption(Record):
    """One placement ``auto`` tried (``memory_options``), in the order it tried them."""

    shard_weights: str
    text_encoder: str
    vae: str
    experts: str
    memory_gib_per_gpu: float
    fits: bool


@dataclass(frozen=True)
class MemoryEstimate(Record):
    """The busiest rank's memory, and whether it fits in 90% of the GPU's."""

    parameter_bytes_per_gpu: int
    activation_bytes_per_gpu: int
    reserved_bytes_per_gpu: int
    memory_bytes_per_gpu: int
    memory_gib_per_gpu: float
    gpu_memory_gib: float
    memory_fraction: float
    fits: bool
    dit_memory_bytes_per_gpu: Optional[int] = None  # generate: the DiT's part of memory_bytes_per_gpu
    memory_options: tuple[MemoryOption, ...] = ()  # what auto tried, when it tried more than one


# -- nested objects ------------------------------------------------------------------------------
@dataclass(frozen=True)
class PipelinePart(Record):
    """Where a part of a generate job's pipeline runs (``ranks``) and its bytes (None: unknown)."""

    ranks: tuple[int, ...]
    placement: Optional[str] = None
    what: Optional[str] = None
    bytes: Optional[int] = None
    bytes_per_rank: Optional[int] = None  # text encoder: on the GPU of each of its ranks
    host_bytes: Optional[int] = None  # text encoder on the CPU
    decode_bytes: Optional[int] = None  # VAE: the decode's working set
    frames_bytes: Optional[int] = None  # VAE: the decoded frames


@dataclass(frozen=True)
class BusiestRank(Record):
    """The busiest rank's (a replica leader's) peak memory, by part."""

    peak_stage: str
    dit_parameters: int
    dit_activations: int
    text_encoder: int
    image_encoder: int
    vae: int
    vae_decode: int
    reserved: int


@dataclass(frozen=True)
class PipelineEstimate(Record):
    """A generate job's text encoder, VAE (and image encoder) placement and memory (plan/pipeline.py)."""

    text_encoder: PipelinePart
    vae: PipelinePart
    transformer: PipelinePart
    leader_memory_bytes: int
    busiest_rank: BusiestRank
    image_encoder: Optional[PipelinePart] = None


@dataclass(frozen=True)
class ExpertsEstimate(Record):
    """Two experts (Wan2.2 A14B): where they live and what the switch costs (plan/experts.py)."""

    count: int
    boundary_ratio: Optional[float]
    placement: str
    expert_bytes_per_gpu: int
    gpu_bytes_per_gpu: int
    host_bytes_per_gpu: int
    host_gb_per_s: float
    host_gb_per_s_source: str
    switch_bytes_per_gpu: int
    switch_s: float


@dataclass(frozen=True)
class StagingEstimate(Record):
    """Copying the weights to every node's local disk (``model.stage: node``; plan/staging.py)."""

    bytes: int
    nodes: int
    shared_fs_gb_per_s: float
    node_local_dir: Optional[str]
    s: float


@dataclass(frozen=True)
class StepBreakdown(Record):
    """The cost model's terms, seconds per step (plan/cost.py: TERMS is this order)."""

    attention: float
    gemm: float
    elementwise: float
    all_to_all: float
    ring_merge: float
    ring_exposed: float
    overhead: float
    eager_host: float
    weight_gather: float


@dataclass(frozen=True)
class PhaseTimes(Record):
    """Seconds per job of each phase, in the order they run (plan/phase_cost.py: PHASES is this
    order; the runtime times encode, load, denoise, decode and save in ``metrics.stages``)."""

    startup: float  # process start, imports, process-group init
    stage: float  # weights copied to each node's disk (model.stage: node)
    load: float  # weights read and moved to the GPU
    encode: float  # text (and image) encoders
    denoise: float  # the denoising loop: steps x step
    switch: float  # Wan2.2's expert switch (offloaded)
    decode: float  # the VAE
    save: float  # the media written


@dataclass(frozen=True)
class PredictedTime(Record):
    """The cost model's prediction (plan/plan_prediction.py) and the band of error it carries."""

    step_s: float
    job_s: float  # every phase + fixed_s: the job's wall time once its ranks start
    fixed_s: float
    decode_s: float
    switch_s: float
    breakdown_s_per_step: StepBreakdown
    ring_comm_bound: bool
    constants: str  # where the constants come from
    band: float  # the held-out ratio error of the published tables (0: none)
    band_basis: str
    phases_s: Optional[PhaseTimes] = None  # job_s by phase (a plan of schema 2 before phases: None)
    generation_s: Optional[float] = None  # encode + denoise + switch + decode + fixed_s (a published table's)
    gpu_hours: Optional[float] = None  # job_s x the plan's GPUs / 3600


#: The groups whose fields sit flat in plan.json's ``estimates`` object.
FLAT_GROUPS = ("compute", "communication", "weights", "memory")


@dataclass(frozen=True)
class Estimates(Record):
    """The Plan's ``estimates``: per GPU and per sample group unless a name says otherwise."""

    compute: ComputeEstimate
    communication: CommunicationEstimate
    weights: WeightsEstimate
    memory: MemoryEstimate
    pipeline: Optional[PipelineEstimate] = None  # generate jobs
    experts: Optional[ExpertsEstimate] = None  # two-expert generate jobs
    staging: Optional[StagingEstimate] = None  # model.stage: node
    layout_choice: Optional[str] = None  # why auto picked the layout (a search ran)
    predicted: Optional[PredictedTime] = None  # the planner's last step fills it in

    @property
    def ideal_s_per_step(self) -> float:
        """Compute + all-to-all + ring at the cluster's nominal rates, no overlap."""
        c = self.communication
        return self.compute.compute_s_per_step_ideal + c.all_to_all_s_per_step_ideal + c.ring_s_per_step_ideal

    # -- JSON ---------------------------------------------------------------------------------
    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for f in dataclasses.fields(self):
            value = getattr(self, f.name)
            if f.name in FLAT_GROUPS:
                out.update(_plain(value))
            elif not _left_out(f, value):
                out[f.name] = _plain(value)
        return out

    @classmethod
    def from_dict(cls, data: Any, where: str = "estimates") -> "Estimates":
        """``data`` (plan.json's object) -> Estimates; ValueError naming the key when a key is
        unknown, missing or of the wrong shape."""
        if not isinstance(data, dict):
            raise ValueError(f"{where} must be an object, got {type(data).__name__}")
        rest = dict(data)
        hints = typing.get_type_hints(cls)
        nested: dict[str, Any] = {}
        for group in FLAT_GROUPS:
            names = {f.name for f in dataclasses.fields(hints[group])}
            nested[group] = {k: rest.pop(k) for k in list(rest) if k in names}
        return _load(cls, {**nested, **rest}, where, flat=FLAT_GROUPS)


def _left_out(f: dataclasses.Field, value: Any) -> bool:
    return f.default in (None, ()) and value == f.default


def _plain(value: Any) -> Any:
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {f.name: _plain(getattr(value, f.name)) for f in dataclasses.fields(value)
                if not _left_out(f, getattr(value, f.name))}
    if isinstance(value, (tuple, list)):
        return [_plain(v) for v in value]
    return value


def _load(cls: type, data: Any, where: str, flat: tuple[str, ...] = ()) -> Any:
    if not isinstance(data, dict):
        raise ValueError(f"{where} must be an object, got {type(data).__name__}")
    fields = {f.name: f for f in dataclasses.fields(cls)}
    unknown = sorted(set(data) - set(fields))
    if unknown:
        raise ValueError(f"{where}: unknown key(s) {', '.join(unknown)}")
    hints = typing.get_type_hints(cls)
    missing = [n for n, f in fields.items() if n not in data and f.default is dataclasses.MISSING
               and f.default_factory is dataclasses.MISSING]
    if missing:
        raise ValueError(f"{where}: missing key(s) {', '.join(missing)}")
    kw = {}
    for key, value in data.items():
        # a flat group's keys are the estimates' own (estimates.fits, not estimates.memory.fits)
        kw[key] = _value(hints[key], value, where if key in flat else f"{where}.{key}")
    return cls(**kw)


def _value(hint: Any, value: Any, where: str) -> Any:
    if value is None:
        return None
    if typing.get_origin(hint) is tuple:
        if not isinstance(value, (list, tuple)):
            raise ValueError(f"{where} must be a list, got {type(value).__name__}")
        item = typing.get_args(hint)[0]
        return tuple(_value(item, v, f"{where}[{i}]") for i, v in enumerate(value))
    sub = dataclass_of(hint)
    if sub is not None:
        return _load(sub, value, where)
    return value


__all__ = ["BusiestRank", "CommunicationEstimate", "ComputeEstimate", "Estimates", "ExpertsEstimate",
           "FLAT_GROUPS", "MemoryEstimate", "MemoryOption", "PipelineEstimate", "PipelinePart",
           "PhaseTimes", "PredictedTime", "StagingEstimate", "StepBreakdown", "WeightsEstimate"]
