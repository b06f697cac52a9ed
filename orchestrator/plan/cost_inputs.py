"""What the cost model needs of a Plan, per rank (:class:`CostInputs`): the one place that reads a
Plan's fields for it, and whether the plan's blocks compile."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Optional

from sporch.orchestrator.contract.quant import gemm_speedup
from sporch.orchestrator.contract.sections import compile_off_reason
from sporch.orchestrator.plan.phase_inputs import PhaseInputs, phase_inputs


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
    inference_kind: bool  # timed end to end (workload.kind inference or generate): encode, decode and fixed_s apply
    gather_bytes: float = 0.0  # per step: the parameters' all-gathers (sharded weights)
    gather_bw: float = 1.0  # B/s, nominal
    compiled: bool = False  # blocks compiled (torch.compile): fused glue, no eager host terms
    switch_s: float = 0.0  # per job: an offloaded expert's copies at the switch (not fitted)
    pixels: float = 0.0  # per job and rank: output pixels x frames the VAE decodes (batch / dp samples)
    video: bool = False  # a video VAE (frames > 1) decodes them; else an image VAE
    phases: Optional[PhaseInputs] = None  # the job's other phases (plan/phase_cost.py); None: denoising alone


def inputs_from_plan(plan: Any, parts: Optional[Any] = None) -> CostInputs:
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
        inference_kind=plan.workload.kind in ("inference", "generate"),
        gather_bytes=float(e.weights.weight_gather_bytes_per_rank_per_step or 0.0),
        gather_bw=float(e.weights.weight_gather_gb_per_s or 1.0) * 1e9,
        compiled=compiles(plan),
        switch_s=float(e.experts.switch_s if e.experts is not None else 0.0),
        pixels=float(max(1, plan.workload.batch // max(1, plan.layout.dp)) * (plan.workload.frames or 1)
                     * (plan.workload.height or 0) * (plan.workload.width or 0)),
        video=(plan.workload.frames or 1) > 1,
        phases=phase_inputs(plan, parts),
    )


def compiles(plan: Any) -> bool:
    """Whether the runtime compiles this plan's blocks on a GPU: ``workload.compile`` unset or
    true, and the parameters not sharded (a sharded model is not compiled: docs/model.md)."""
    placement = getattr(plan, "placement", None)
    return compile_off_reason(plan.workload.compile, placement.shard_weights if placement is not None else "none") is None
