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
    job  = startup + stage + load + encode + loop steps x step + expert switch + decode + save
           + fixed_s (plan/phase_cost.py: each phase's own terms; encode, decode and fixed_s for a
           job timed end to end, save for a generate job)
    generation = encode + steps x step + switch + decode + fixed_s: what a published end-to-end
           table times (its pipeline already loaded)

GEMM FLOPs are 2 x the parameters a token passes through (``estimates.compute.token_parameters``:
no modulation, one stream of a double block) per token, plus the cross-attention's text keys
and values on every rank. A plan compiles its blocks when ``workload.compile`` is not false
and the parameters are not sharded (the runtime's rule on a GPU).

``occupancy = min(1, tiles / parallel_units)`` with one tile per 128 query rows x head x
sample of a ring block: few heads per rank or short local sequences leave SMs idle. The GEMMs
have theirs (``gemm_occupancy``: 128 x 128 output tiles of the rank's tokens x hidden): a small
image over many GPUs does not scale like a long video.

Constants come from the GPU model's row of ``data/gpus.yaml`` (priors) with the one fit to every
published table applied (``data/fitted.yaml``, plan/validation.py), overridden by the cluster
descriptor's calibration (``calibration:`` file -> ``calibration_constants``): :mod:`.cost_constants`.
The inputs are a plan's :class:`.cost_inputs.CostInputs`, the terms per layer :mod:`.cost_terms`.
Every term is a constant times a feature of the plan, except the ring's max() and the expert switch;
:func:`.cost_features.features` gives that linear form (for :mod:`.calibration`;
:func:`.cost_features.unfitted_s` the rest), :func:`predict` the times (:mod:`.plan_prediction`: a
Plan's). docs/plan.md explains the terms and their limits.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, fields
from typing import Any, Mapping

from sporch.orchestrator.contract.estimates_section import StepBreakdown
from sporch.orchestrator.plan.cost_inputs import CostInputs
from sporch.orchestrator.plan.cost_terms import layer_compute, layer_terms
from sporch.orchestrator.plan.phase_cost import GENERATION, PHASES, phase_times, phases_of

#: Breakdown terms, in display order: the fields of the Plan's ``estimates.predicted.breakdown_s_per_step``.
TERMS = tuple(f.name for f in fields(StepBreakdown))


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
    phases: tuple[tuple[str, float], ...] = ()  # per job: PHASES' seconds, in order
    generation_s: float = 0.0  # GENERATION's seconds + fixed_s: one generation, its pipeline loaded

    def phase(self, name: str) -> float:
        return dict(self.phases).get(name, 0.0)

    def breakdown(self) -> dict[str, float]:
        return {t: getattr(self, t) for t in TERMS}

    def to_dict(self) -> dict[str, Any]:
        out = {k: (round(v, 9) if isinstance(v, float) else v) for k, v in asdict(self).items() if k != "phases"}
        out["phases"] = {k: round(v, 9) for k, v in self.phases}
        return out


def predict(x: CostInputs, c: Mapping[str, float]) -> Prediction:
    t = layer_terms(x, c)
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
        step["weight_gather"] = t["gather"] + (L - 1) * max(0.0, t["gather"] - layer_compute(t))
    step_s = sum(step.values())
    fixed = c["fixed_s"] if x.inference_kind else 0.0
    times = phase_times(x, c)
    times["denoise"] = phases_of(x).loop_steps * step_s
    phases = tuple((ph, times[ph]) for ph in PHASES)
    generation = fixed + sum(times[ph] for ph in GENERATION) - times["denoise"] + x.steps * step_s
    return Prediction(step_s=step_s, job_s=sum(times.values()) + fixed, fixed_s=fixed, decode_s=times["decode"],
                      switch_s=x.switch_s, ring_comm_bound=bound, host_bound=host_bound, phases=phases,
                      generation_s=generation, **step)
