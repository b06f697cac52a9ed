"""The cost model as a linear form: a prediction is sum(feature x parameter) over the fitted
constants (:func:`features`, :func:`parameters`), plus what no fitted constant scales
(:func:`unfitted_s`). What calibration (plan/calibration.py) fits."""

from __future__ import annotations

from typing import Mapping

from sporch.orchestrator.plan.cost import predict
from sporch.orchestrator.plan.cost_inputs import CostInputs
from sporch.orchestrator.plan.cost_terms import (
    INVERSE,
    a2a_messages,
    eager_ring_step,
    elementwise_key,
    gemm_occupancy,
    host_counts,
    layer_compute,
    layer_terms,
    merge_elements,
    occupancy,
)
from sporch.orchestrator.plan.phase_cost import DECODE, GENERATION, PHASE_CONSTANTS, PHASES, linear_phases, phases_of

#: The constants (CONSTANTS: the GPU table's columns) that calibration fits.
FITTED = ("gemm_efficiency", "attention_efficiency", "elementwise_bytes", "compiled_elementwise_bytes",
          "ring_merge_bytes", "ring_step_s", "eager_ring_step_s", "link_efficiency", "a2a_latency_s", "p2p_latency_s",
          "layer_overhead_s", "eager_layer_s", "eager_a2a_message_s", "eager_ring_layer_s", "fixed_s",
          *DECODE, *PHASE_CONSTANTS)
#: What an observation measures: seconds per step, one generation ("job": a published end-to-end
#: table's), the whole job ("all": every phase), or one phase (a generate job's metrics.stages).
LEVELS = ("step", "job", "all", *PHASES)


def _gather_exposed(x: CostInputs, c: Mapping[str, float]) -> bool:
    t = layer_terms(x, c)
    return x.gather_bytes > 0 and t["gather"] > layer_compute(t)


def _phase_levels(level: str) -> tuple[str, ...]:
    """The phases (but denoise) an observation of ``level`` adds up."""
    if level == "job":
        return tuple(ph for ph in GENERATION if ph != "denoise")
    if level == "all":
        return tuple(ph for ph in PHASES if ph != "denoise")
    return (level,) if level in PHASES and level != "denoise" else ()


def unfitted_s(x: CostInputs, level: str = "step", c: Mapping[str, float] | None = None) -> float:
    """The part of a prediction no fitted constant scales (:func:`features` leaves it out): the
    expert switch's copies, reading and copying the weights at the descriptor's rates, staging."""
    if not _phase_levels(level):
        return 0.0
    lin = linear_phases(x, c or {"hbm_gb_per_s": 1.0})
    return sum(lin[ph][1] for ph in _phase_levels(level))


def features(x: CostInputs, c: Mapping[str, float], level: str = "step") -> dict[str, float]:
    """The prediction as sum(feature x parameter) over FITTED, in the regime (ring transfer
    exposed or hidden) that the constants ``c`` put it in. Parameters: 1 / value for INVERSE
    constants, the value for the others. ``level``: "step" (seconds per step) or "job"."""
    if level in PHASES and level != "denoise" or level not in LEVELS:
        return _phase_features(x, c, level)
    L = x.layers
    occ = occupancy(x, c["parallel_units"])
    attn = x.attention_flops / (x.peak_flops * occ)
    gemm = x.gemm_flops / (x.peak_flops * gemm_occupancy(x, c["parallel_units"]))
    f = dict.fromkeys(FITTED, 0.0)
    f["gemm_efficiency"] = gemm
    elem = elementwise_key(x)
    f[elem] = L * x.samples * x.tokens_rank * x.hidden / (c["hbm_gb_per_s"] * 1e9)
    f["layer_overhead_s"] = float(L)
    if x.ulysses > 1:
        f["link_efficiency"] += L * x.a2a_bytes / x.a2a_bw
        f["a2a_latency_s"] = float(L * a2a_messages(x))
    f["attention_efficiency"] = attn
    if x.ring > 1:
        merge = L * (x.ring - 1) * merge_elements(x) / (c["hbm_gb_per_s"] * 1e9)
        f["ring_merge_bytes"] = merge
        f["ring_step_s"] = float(L * (x.ring - 1))
        f["eager_ring_step_s"] = eager_ring_step(x) * f["ring_step_s"]
        if predict(x, c).ring_comm_bound:
            # + L (R-1) (transfer - block), block = (attention + merge) / (L R): both keep 1/R
            f["attention_efficiency"] = attn / x.ring
            f["ring_merge_bytes"] = merge / x.ring
            f["ring_step_s"] = float(L * (x.ring - 1)) / x.ring
            f["eager_ring_step_s"] = eager_ring_step(x) * f["ring_step_s"]
            f["link_efficiency"] += L * x.ring_bytes / x.ring_bw
            f["p2p_latency_s"] = float(L * (x.ring - 1))
    if x.gather_bytes > 0:
        f["link_efficiency"] += x.gather_bytes / L / x.gather_bw  # the first block's gather
        if _gather_exposed(x, c):
            # + (L-1) (gather - compute): L-1 layers' compute is hidden behind their gathers
            f["link_efficiency"] += (L - 1) * x.gather_bytes / L / x.gather_bw
            f["gemm_efficiency"] -= (L - 1) / L * gemm
            f["attention_efficiency"] -= (L - 1) / L * attn
            f[elem] -= (L - 1) * x.samples * x.tokens_rank * x.hidden / (c["hbm_gb_per_s"] * 1e9)
    if host_counts(x) and predict(x, c).host_bound:
        # the layer is the host's: its launches, not the GPU's work, set the time
        f = dict.fromkeys(FITTED, 0.0)
        f.update({k: L * n for k, n in host_counts(x).items()})
    if level == "step":
        return f
    steps = x.steps if level == "job" else phases_of(x).loop_steps
    f = {k: v * steps for k, v in f.items()}
    if level in ("job", "all"):
        f["fixed_s"] = 1.0 if x.inference_kind else 0.0
        for k, v in _phase_features(x, c, level).items():
            f[k] += v
    return f


def _phase_features(x: CostInputs, c: Mapping[str, float], level: str) -> dict[str, float]:
    """The features of the phases (but denoise) ``level`` adds up (plan/phase_cost.py)."""
    if level not in LEVELS:
        raise ValueError(f"unknown observation level {level!r}; one of {', '.join(LEVELS)}")
    f = dict.fromkeys(FITTED, 0.0)
    lin = linear_phases(x, c)
    for ph in _phase_levels(level):
        for k, v in lin[ph][0].items():
            f[k] += v
    return f


def parameters(c: Mapping[str, float]) -> dict[str, float]:
    """Constants -> the linear parameters of :func:`features`."""
    return {k: (1.0 / c[k] if k in INVERSE else c[k]) for k in FITTED}


def constants_from(params: Mapping[str, float], base: Mapping[str, float]) -> dict[str, float]:
    out = dict(base)
    for k, v in params.items():
        out[k] = 1.0 / v if k in INVERSE else v
    return out
