"""Predicted step time of a Plan: a per-layer cost model with calibrated constants.

Per rank and per layer (one DiT block; every rank of a sequence group does the same work, and
dp / cfg replicas run independently, so one rank's time is the step time):

    gemm        = gemm FLOPs / (peak x gemm_efficiency)
    attention   = attention FLOPs / (peak x attention_efficiency x occupancy)
    elementwise = tokens x hidden x elementwise_bytes / HBM bandwidth
                  (compiled blocks: compiled_elementwise_bytes, the glue Inductor fuses)
    all-to-all  = bytes / (link x link_efficiency)
                  + 2 calls x (ulysses - 1) peers x a2a_latency_s                 (ulysses > 1)
    ring merge  = (R - 1) merges of a block's output into the accumulator:
                  query tokens x heads x head_dim x ring_merge_bytes / HBM bandwidth
                  + ring_step_s, the fixed cost of one more block (its attention and merge
                  kernels' launches and tails)
                  + eager_ring_step_s (eager blocks only: the merge's unfused kernels and the
                  step's send/receive bookkeeping that Inductor removes)           (ring > 1)
    ring        = R blocks (attention / R + its merge); each of the R - 1 K/V transfers
                  (bytes / (link x link_efficiency) + p2p_latency_s) hides behind one block:
                  exposed = (R - 1) x max(0, transfer - block)                   (ring > 1)
    overhead    = layer_overhead_s
    eager host  = an eager (not compiled, not sharded) layer takes the longer of the GPU's work
                  (every term above) and the host's launching of it: host = eager_layer_s +
                  eager_a2a_message_s per all-to-all message + eager_ring_layer_s when ring > 1;
                  the term is max(0, host - GPU work)                             (eager only)
    weight gather (parameters sharded, FSDP2): each block is all-gathered before it runs,
                  gather = block's share of the bytes / (link x link_efficiency); the next
                  block's gather is prefetched behind this block's compute (gemm + attention
                  + elementwise), the first has nothing to hide behind:
                  exposed = gather + (layers - 1) x max(0, gather - compute)   (per step)

    step = layers x (gemm + attention + elementwise + all-to-all + ring merge + ring exposed
                     + overhead + eager host) + weight gather
    job  = steps x step + fixed_s (text encoder: workload.kind inference only)
           + decode (the VAE's, kind inference: output pixels x frames x decode_bytes_per_pixel
             / HBM bandwidth for a video VAE, image_decode_bytes_per_pixel for an image one)
           + expert switch (two experts, the idle one offloaded: the planner's
             ``estimates.experts.switch_s``, bytes / the cluster's host <-> GPU rate; not fitted)

GEMM FLOPs are 2 x the parameters a token passes through (``estimates.compute.token_parameters``:
no modulation, one stream of a double block) per token, plus the cross-attention's text keys
and values on every rank. A plan compiles its blocks when ``workload.compile`` is not false
and the parameters are not sharded (the runtime's rule on a GPU).

``occupancy = min(1, tiles / parallel_units)`` with one tile per 128 query rows x head x
sample of a ring block: few heads per rank or short local sequences leave SMs idle.

Constants come from the GPU model's row of ``data/gpus.yaml`` (priors) with the one fit to every
published table applied (``data/fitted.yaml``, plan/validation.py), overridden by the cluster
descriptor's calibration (``calibration:`` file -> ``calibration_constants``). Every term is a
constant times a feature of the plan, except the ring's max() and the expert switch;
:func:`features` gives that linear form (for :mod:`.calibration`; :func:`unfitted_s` the rest),
:func:`predict` the times. docs/plan.md explains the terms and their limits.
"""

from __future__ import annotations

import fnmatch
import functools
import math
from dataclasses import asdict, dataclass, fields, replace
from pathlib import Path
from typing import Any, Mapping, Optional

from sporch.orchestrator.contract.estimates_section import PredictedTime, StepBreakdown
from sporch.orchestrator.contract.quant import gemm_speedup
from sporch.orchestrator.config.calibration_file import CONSTANTS
from sporch.orchestrator.contract.sections import compile_off_reason
from sporch.orchestrator.errors import SporchError

#: The constants (CONSTANTS: the GPU table's columns) that calibration fits.
FITTED = ("gemm_efficiency", "attention_efficiency", "elementwise_bytes", "compiled_elementwise_bytes",
          "ring_merge_bytes", "ring_step_s", "eager_ring_step_s", "link_efficiency", "a2a_latency_s", "p2p_latency_s",
          "layer_overhead_s", "eager_layer_s", "eager_a2a_message_s", "eager_ring_layer_s", "fixed_s",
          "decode_flops_per_pixel",
          "decode_bytes_per_pixel", "image_decode_bytes_per_pixel")
#: Constants that enter as 1 / value (rates); the others enter as they are (costs).
INVERSE = ("gemm_efficiency", "attention_efficiency", "link_efficiency")
#: Breakdown terms, in display order: the fields of the Plan's ``estimates.predicted.breakdown_s_per_step``.
TERMS = tuple(f.name for f in fields(StepBreakdown))
A2A_CALLS_PER_LAYER = 2  # q/k/v in, output back (runtime/attention/ulysses.py)
TILE_ROWS = 128
GPU_TABLE = Path(__file__).resolve().parent / "data" / "gpus.yaml"
#: The one fit of SHARED_FIT to every published table (plan/validation.py): applied to every GPU
#: row but ``cpu`` by :func:`default_constants`.
FITTED_TABLE = Path(__file__).resolve().parent / "data" / "fitted.yaml"
#: The constants fitted to the published tables, shared by every GPU model: efficiencies as one
#: multiplier of each GPU's prior, the others as one value (plan/calibration.py, fit_shared).
#: Chosen by the leave-one-table-out validation (docs/plan.md): ``fixed_s`` (one number for every
#: pipeline), ``ring_step_s`` (fitted on eager rings it took the host's time and made held-out
#: compiled rings up to 5.5x too slow) and a video VAE's FLOPs per pixel (worse held-out tables) are
#: not fitted: they stay at the GPU rows' priors (0), for a calibration to set. ``ring_merge_bytes``
#: stays at issue 13's kernel measurement (43): fitted beside ``eager_ring_step_s`` it fell to 0 and
#: the held-out compiled H100 Flux table lost its ring 4 vs Ulysses 4 order.
SHARED_FIT = ("gemm_efficiency", "attention_efficiency", "elementwise_bytes", "compiled_elementwise_bytes",
              "eager_ring_step_s", "link_efficiency", "a2a_latency_s", "p2p_latency_s", "layer_overhead_s", "eager_layer_s",
              "eager_a2a_message_s", "eager_ring_layer_s", "decode_bytes_per_pixel", "image_decode_bytes_per_pixel")


# -- constants ------------------------------------------------------------------------------
def read_data_table(path: Path) -> Any:
    """A YAML table shipped with sporch (``plan/data/``), parsed by libyaml where PyYAML has it:
    the same safe loading (the same constructors and implicit types) as ``yaml.safe_load``, about
    8 x faster, which the dry run's start-up feels (``gpus.yaml``: ~9 ms in Python, ~1 ms in C;
    tests/plan/test_data_tables.py holds the two equal). User files keep the pure-Python parser
    (their error messages)."""
    import yaml

    with open(path, encoding="utf-8") as fh:
        return yaml.load(fh, Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader))


@functools.lru_cache(maxsize=1)
def gpu_table() -> tuple[dict[str, Any], ...]:
    return tuple(read_data_table(GPU_TABLE)["gpus"])


def gpu_entry(model: str) -> dict[str, Any]:
    """The table row whose ``match`` patterns match ``model`` (case-insensitive); ``generic`` last."""
    name = (model or "").lower()
    for row in gpu_table():
        if any(fnmatch.fnmatchcase(name, pat.lower()) for pat in row["match"]):
            return row
    return gpu_table()[-1]


def prior_constants(gpu_model: str) -> dict[str, float]:
    """The GPU row's own values (spec sheets, kernel measurements, round numbers): no fit to the
    published tables in them."""
    row = gpu_entry(gpu_model)
    return {k: float(row[k]) for k in CONSTANTS}


@functools.lru_cache(maxsize=1)
def fitted_table() -> dict[str, Any]:
    if not FITTED_TABLE.exists():
        return {"scales": {}, "values": {}}
    return read_data_table(FITTED_TABLE)


def prediction_band(gpu_model: str, compiled: bool) -> tuple[float, str]:
    """(band, what it rests on): the largest held-out ratio error of the published tables of this
    GPU row and mode (plan/validation.py; ``data/fitted.yaml``'s ``bands``), else of every table of
    the mode; (0, "") where no table says anything (the cpu row, a missing fit). The band is about
    ratios between layouts; where sporch's own steps were measured on that GPU row and mode
    (``absolute``: plan/absolute_check.py) the text adds how far their absolute times were from
    the prediction."""
    mode = "compiled" if compiled else "eager"
    row = gpu_entry(gpu_model)["name"]
    bands = fitted_table().get("bands") or {}
    if row == "cpu":
        return 0.0, ""
    measured = (fitted_table().get("absolute") or {}).get(row, {}).get(mode)
    absolute = f"; sporch's measured {row} {mode} steps {measured[0]:+.0%}..{measured[1]:+.0%} vs predicted" if measured else ""
    if mode in (bands.get(row) or {}):
        return float(bands[row][mode]), f"held-out {row} {mode} tables{absolute}"
    if mode in (bands.get("*") or {}):
        return float(bands["*"][mode]), f"held-out {mode} tables, no {row} one{absolute}"
    return 0.0, ""


def default_constants(gpu_model: str) -> dict[str, float]:
    """The GPU row's priors with the published tables' fit (``data/fitted.yaml``) applied; the
    ``cpu`` row (gloo ranks: calibrate them) stays as it is."""
    consts = prior_constants(gpu_model)
    if gpu_entry(gpu_model)["name"] == "cpu":
        return consts
    fit = fitted_table()
    for k, s in (fit.get("scales") or {}).items():
        consts[k] = consts[k] * float(s)
    consts.update({k: float(v) for k, v in (fit.get("values") or {}).items()})
    return consts


def cluster_constants(cluster: Any) -> tuple[dict[str, float], str]:
    """(constants, where they come from) for a cluster descriptor (a ClusterSpec)."""
    model = cluster.gpu.model or ""
    consts = default_constants(model)
    source = f"{gpu_entry(model)['name']} defaults"
    if cluster.calibration_constants:
        consts.update({k: float(v) for k, v in cluster.calibration_constants.items() if k in CONSTANTS})
        source = f"calibration {cluster.calibration or '(inline)'}"
    return consts, source


# -- inputs: the one place that reads a Plan ------------------------------------------------
@dataclass(frozen=True)
class CostInputs:
    """What the model needs of a plan (per rank)."""

    peak_flops: float  # FLOP/s
    layers: int
    samples: int  # samples per rank per step (batch / dp, x2 with CFG on and cfg = 1)
    seq_total: int  # image/video + joint text tokens of one sample (padded)
    tokens_rank: int  # of them on this rank before the all-to-all
    hidden: int
    head_dim: int
    q_heads_max: int  # query heads on the busiest Ulysses rank
    ring: int
    ulysses: int
    gemm_flops: float  # per rank per step
    attention_flops: float  # per rank per step (busiest rank)
    a2a_bytes: float  # per layer
    ring_bytes: float  # per layer, all R - 1 transfers
    a2a_bw: float  # B/s, nominal
    ring_bw: float  # B/s, nominal
    steps: int
    inference_kind: bool  # workload.kind == "inference": timed end to end (text encoder, VAE), fixed costs apply
    gather_bytes: float = 0.0  # per step: the parameters' all-gathers (sharded weights)
    gather_bw: float = 1.0  # B/s, nominal
    compiled: bool = False  # blocks compiled (torch.compile): fused glue, no eager host terms
    switch_s: float = 0.0  # per job: an offloaded expert's copies at the switch (not fitted)
    pixels: float = 0.0  # per job and rank: output pixels x frames the VAE decodes (batch / dp samples)
    video: bool = False  # a video VAE (frames > 1) decodes them; else an image VAE


def inputs_from_plan(plan: Any) -> CostInputs:
    """CostInputs from a Plan (its sections and its typed ``estimates``). Every read of plan fields
    in the cost model is here."""
    m, e = plan.model, plan.estimates
    if e is None:
        raise ValueError("the plan has no estimates (a plan built by hand): make it with the planner (sporch plan)")
    work, comm = e.compute, e.communication
    R, U = plan.layout.ring, plan.layout.ulysses
    layers = int(work.attention_calls_per_step)
    samples = int(work.samples_per_rank)
    text_rank = int(work.text_tokens_per_rank or 0)
    seq_total = plan.sequence.padded_len + text_rank * R * U
    q_heads = max(plan.heads.q_heads_per_rank)
    # a schema-2 plan without token_parameters loads with every parameter per token (contract/plan.py)
    token_params = float(work.token_parameters or work.parameters)
    gemm = 2.0 * token_params * seq_total * samples / (R * U) + float(work.context_flops_per_sample or 0) * samples
    gemm /= gemm_speedup(getattr(m, "quant", "none"))  # model.quant: none counted (contract/quant.py)
    attention = 4.0 * seq_total * seq_total * m.head_dim * q_heads * layers * samples / R
    return CostInputs(
        peak_flops=float(plan.cluster.gpu.bf16_tflops) * 1e12,
        layers=layers, samples=samples, seq_total=seq_total,
        tokens_rank=int(work.tokens_per_rank) + text_rank,
        hidden=m.hidden, head_dim=m.head_dim, q_heads_max=q_heads, ring=R, ulysses=U,
        gemm_flops=gemm, attention_flops=attention,
        a2a_bytes=float(comm.all_to_all_bytes_per_rank),
        ring_bytes=float(comm.ring_bytes_per_rank),
        a2a_bw=float(comm.all_to_all_gb_per_s) * 1e9,
        ring_bw=float(comm.ring_gb_per_s) * 1e9,
        steps=plan.workload.steps,
        inference_kind=plan.workload.kind == "inference",
        gather_bytes=float(e.weights.weight_gather_bytes_per_rank_per_step or 0.0),
        gather_bw=float(e.weights.weight_gather_gb_per_s or 1.0) * 1e9,
        compiled=compiles(plan),
        switch_s=float(e.experts.switch_s if e.experts is not None else 0.0),
        pixels=float(max(1, plan.workload.batch // max(1, plan.layout.dp)) * (plan.workload.frames or 1)
                     * (plan.workload.height or 0) * (plan.workload.width or 0)),
        video=(plan.workload.frames or 1) > 1,
    )


def compiles(plan: Any) -> bool:
    """Whether the runtime compiles this plan's blocks on a GPU: ``workload.compile`` unset or
    true, and the parameters not sharded (a sharded model is not compiled: docs/model.md)."""
    placement = getattr(plan, "placement", None)
    return compile_off_reason(plan.workload.compile, placement.shard_weights if placement is not None else "none") is None


# -- the model --------------------------------------------------------------------------------
def occupancy(x: CostInputs, parallel_units: float) -> float:
    tiles = x.samples * x.q_heads_max * math.ceil(x.seq_total / x.ring / TILE_ROWS)
    return min(1.0, tiles / max(parallel_units, 1.0))


@dataclass(frozen=True)
class Prediction:
    step_s: float
    job_s: float
    attention: float  # per step, seconds, the terms of TERMS
    gemm: float
    elementwise: float
    all_to_all: float
    ring_merge: float
    ring_exposed: float
    overhead: float
    eager_host: float
    weight_gather: float
    fixed_s: float  # per job
    decode_s: float  # per job: the VAE's decode of the output (kind inference)
    switch_s: float  # per job: the expert switch's host <-> GPU copies
    ring_comm_bound: bool  # a ring transfer takes longer than the attention block it hides behind
    host_bound: bool = False  # eager: the host's launches take longer than the GPU's work (per layer)

    def breakdown(self) -> dict[str, float]:
        return {t: getattr(self, t) for t in TERMS}

    def to_dict(self) -> dict[str, Any]:
        return {k: (round(v, 9) if isinstance(v, float) else v) for k, v in asdict(self).items()}


def _layer_terms(x: CostInputs, c: Mapping[str, float]) -> dict[str, float]:
    """Seconds per layer of each term (ring: per transfer and per block, not yet combined)."""
    L = x.layers
    occ = occupancy(x, c["parallel_units"])
    t = {
        "gemm": x.gemm_flops / L / (x.peak_flops * c["gemm_efficiency"]),
        "attention": x.attention_flops / L / (x.peak_flops * c["attention_efficiency"] * occ),
        "elementwise": x.samples * x.tokens_rank * x.hidden * _elementwise_bytes(x, c) / (c["hbm_gb_per_s"] * 1e9),
        "all_to_all": (x.a2a_bytes / (x.a2a_bw * c["link_efficiency"]) + _a2a_messages(x) * c["a2a_latency_s"]
                       if x.ulysses > 1 else 0.0),
        "overhead": c["layer_overhead_s"],
        "host": sum(n * c[k] for k, n in _host_counts(x).items()),
        "gather": x.gather_bytes / L / (x.gather_bw * c["link_efficiency"]),
    }
    t["ring_merge"] = 0.0
    if x.ring > 1:
        t["ring_merge"] = (x.ring - 1) * (_merge_elements(x) * c["ring_merge_bytes"] / (c["hbm_gb_per_s"] * 1e9)
                                          + c["ring_step_s"] + _eager_ring_step(x) * c["eager_ring_step_s"])
        t["ring_transfer"] = x.ring_bytes / (x.ring - 1) / (x.ring_bw * c["link_efficiency"]) + c["p2p_latency_s"]
        t["ring_block"] = (t["attention"] + t["ring_merge"]) / x.ring
    return t


def _host_counts(x: CostInputs) -> dict[str, float]:
    """An eager layer's host time as counts of the host constants (compiled or sharded: none).
    Per all-to-all message (peer and call): c10d's all_to_all_single enqueues one send and one
    receive per peer on the host. Counted per call instead, the held-out tables came out no better
    with issue 416's table in (docs/plan.md)."""
    if x.compiled or x.gather_bytes > 0:
        return {}
    return {"eager_layer_s": 1.0, "eager_a2a_message_s": float(_a2a_messages(x)),
            "eager_ring_layer_s": 1.0 if x.ring > 1 else 0.0}


def _eager_ring_step(x: CostInputs) -> float:
    """1 where a ring step's eager cost applies (blocks not compiled), else 0."""
    return 0.0 if x.compiled else 1.0


def _compute(t: Mapping[str, float]) -> float:
    """A layer's compute: what a prefetched weight gather hides behind."""
    return t["gemm"] + t["attention"] + t["elementwise"]


def _gather_exposed(x: CostInputs, c: Mapping[str, float]) -> bool:
    t = _layer_terms(x, c)
    return x.gather_bytes > 0 and t["gather"] > _compute(t)


def _a2a_messages(x: CostInputs) -> int:
    """Messages of one layer's all-to-alls on one rank: one per peer and call."""
    return A2A_CALLS_PER_LAYER * (x.ulysses - 1)


def _elementwise_key(x: CostInputs) -> str:
    return "compiled_elementwise_bytes" if x.compiled else "elementwise_bytes"


def _elementwise_bytes(x: CostInputs, c: Mapping[str, float]) -> float:
    return c[_elementwise_key(x)]


def _merge_elements(x: CostInputs) -> float:
    """Output elements one ring merge reads and writes (per layer, this rank)."""
    return x.samples * (x.seq_total / x.ring) * x.q_heads_max * x.head_dim


def predict(x: CostInputs, c: Mapping[str, float]) -> Prediction:
    t = _layer_terms(x, c)
    L = x.layers
    exposed, bound = 0.0, False
    if x.ring > 1:
        bound = t["ring_transfer"] > t["ring_block"]
        exposed = (x.ring - 1) * max(0.0, t["ring_transfer"] - t["ring_block"])
    step = {k: L * t[k] for k in ("attention", "gemm", "elementwise", "all_to_all", "ring_merge", "overhead")}
    step["ring_exposed"] = L * exposed
    # an eager layer takes the longer of the GPU's work and the host's launching of it
    gpu_layer = sum(step.values()) / L
    host_bound = t["host"] > gpu_layer
    step["eager_host"] = L * max(0.0, t["host"] - gpu_layer)
    step["weight_gather"] = 0.0
    if x.gather_bytes > 0:
        step["weight_gather"] = t["gather"] + (L - 1) * max(0.0, t["gather"] - _compute(t))
    step_s = sum(step.values())
    fixed = c["fixed_s"] if x.inference_kind else 0.0
    decode = sum(_decode_features(x, c)[k] * c[k] for k in DECODE)
    return Prediction(step_s=step_s, job_s=x.steps * step_s + fixed + decode + x.switch_s, fixed_s=fixed,
                      decode_s=decode, switch_s=x.switch_s, ring_comm_bound=bound, host_bound=host_bound, **step)


#: The constants of the VAE's decode (per job, kind inference): a video VAE's FLOPs and bytes per
#: output pixel x frame, an image VAE's bytes per pixel.
DECODE = ("decode_flops_per_pixel", "decode_bytes_per_pixel", "image_decode_bytes_per_pixel")


def _decode_features(x: CostInputs, c: Mapping[str, float]) -> dict[str, float]:
    f = dict.fromkeys(DECODE, 0.0)
    if x.inference_kind and x.pixels:
        if x.video:
            f["decode_flops_per_pixel"] = x.pixels / x.peak_flops
            f["decode_bytes_per_pixel"] = x.pixels / (c["hbm_gb_per_s"] * 1e9)
        else:
            f["image_decode_bytes_per_pixel"] = x.pixels / (c["hbm_gb_per_s"] * 1e9)
    return f


def unfitted_s(x: CostInputs, level: str = "step") -> float:
    """The part of a prediction no fitted constant scales (:func:`features` leaves it out): the
    expert switch's copies, per job."""
    return x.switch_s if level == "job" else 0.0


def features(x: CostInputs, c: Mapping[str, float], level: str = "step") -> dict[str, float]:
    """The prediction as sum(feature x parameter) over FITTED, in the regime (ring transfer
    exposed or hidden) that the constants ``c`` put it in. Parameters: 1 / value for INVERSE
    constants, the value for the others. ``level``: "step" (seconds per step) or "job"."""
    L = x.layers
    occ = occupancy(x, c["parallel_units"])
    attn = x.attention_flops / (x.peak_flops * occ)
    f = dict.fromkeys(FITTED, 0.0)
    f["gemm_efficiency"] = x.gemm_flops / x.peak_flops
    elem = _elementwise_key(x)
    f[elem] = L * x.samples * x.tokens_rank * x.hidden / (c["hbm_gb_per_s"] * 1e9)
    f["layer_overhead_s"] = float(L)
    if x.ulysses > 1:
        f["link_efficiency"] += L * x.a2a_bytes / x.a2a_bw
        f["a2a_latency_s"] = float(L * _a2a_messages(x))
    f["attention_efficiency"] = attn
    if x.ring > 1:
        merge = L * (x.ring - 1) * _merge_elements(x) / (c["hbm_gb_per_s"] * 1e9)
        f["ring_merge_bytes"] = merge
        f["ring_step_s"] = float(L * (x.ring - 1))
        f["eager_ring_step_s"] = _eager_ring_step(x) * f["ring_step_s"]
        if predict(x, c).ring_comm_bound:
            # + L (R-1) (transfer - block), block = (attention + merge) / (L R): both keep 1/R
            f["attention_efficiency"] = attn / x.ring
            f["ring_merge_bytes"] = merge / x.ring
            f["ring_step_s"] = float(L * (x.ring - 1)) / x.ring
            f["eager_ring_step_s"] = _eager_ring_step(x) * f["ring_step_s"]
            f["link_efficiency"] += L * x.ring_bytes / x.ring_bw
            f["p2p_latency_s"] = float(L * (x.ring - 1))
    if x.gather_bytes > 0:
        f["link_efficiency"] += x.gather_bytes / L / x.gather_bw  # the first block's gather
        if _gather_exposed(x, c):
            # + (L-1) (gather - compute): L-1 layers' compute is hidden behind their gathers
            f["link_efficiency"] += (L - 1) * x.gather_bytes / L / x.gather_bw
            f["gemm_efficiency"] -= (L - 1) / L * x.gemm_flops / x.peak_flops
            f["attention_efficiency"] -= (L - 1) / L * attn
            f[elem] -= (L - 1) * x.samples * x.tokens_rank * x.hidden / (c["hbm_gb_per_s"] * 1e9)
    if _host_counts(x) and predict(x, c).host_bound:
        # the layer is the host's: its launches, not the GPU's work, set the time
        f = dict.fromkeys(FITTED, 0.0)
        f.update({k: L * n for k, n in _host_counts(x).items()})
    if level == "job":
        f = {k: v * x.steps for k, v in f.items()}
        f["fixed_s"] = 1.0 if x.inference_kind else 0.0
        f.update(_decode_features(x, c))
    return f


def parameters(c: Mapping[str, float]) -> dict[str, float]:
    """Constants -> the linear parameters of :func:`features`."""
    return {k: (1.0 / c[k] if k in INVERSE else c[k]) for k in FITTED}


def constants_from(params: Mapping[str, float], base: Mapping[str, float]) -> dict[str, float]:
    out = dict(base)
    for k, v in params.items():
        out[k] = 1.0 / v if k in INVERSE else v
    return out


def predict_plan(plan: Any, constants: Optional[Mapping[str, float]] = None) -> Prediction:
    """Prediction for a Plan with the given constants (default: its cluster's)."""
    c = constants if constants is not None else cluster_constants(plan.cluster)[0]
    return predict(inputs_from_plan(plan), c)


def prediction_record(plan: Any) -> PredictedTime:
    """What the Plan records as ``estimates.predicted`` (docs/plan.md)."""
    consts, source = cluster_constants(plan.cluster)
    p = predict(inputs_from_plan(plan), consts)
    times = {"step": p.step_s, "job": p.job_s, **p.breakdown()}
    bad = next((k for k, v in times.items() if not math.isfinite(v)), None)
    if bad is not None:  # constants each finite but extreme (an efficiency of 1e-310, an overhead of 1e308)
        raise SporchError(f"the cost model's constants ({source}) predict a {bad} time of {times[bad]} s; "
                          "set them to realistic values (efficiencies near 0.1..1, latencies in seconds)")
    band, basis = _band(plan, source)
    return PredictedTime(
        step_s=round(p.step_s, 9),
        job_s=round(p.job_s, 9),
        fixed_s=p.fixed_s,
        decode_s=round(p.decode_s, 9),
        switch_s=round(p.switch_s, 9),
        breakdown_s_per_step=StepBreakdown(**{k: round(v, 9) for k, v in p.breakdown().items()}),
        ring_comm_bound=p.ring_comm_bound,
        constants=source,
        band=band,
        band_basis=basis,
    )


def _band(plan: Any, source: str) -> tuple[float, str]:
    """The band of a prediction made with the defaults (a calibration's own errors are its file's)."""
    if source.startswith("calibration"):
        return 0.0, ""
    return prediction_band(plan.cluster.gpu.model or "", compiles(plan))


def with_prediction(plan: Any) -> Any:
    """``plan`` with ``estimates.predicted`` filled in (the planner's last step)."""
    return replace(plan, estimates=replace(plan.estimates, predicted=prediction_record(plan)))
