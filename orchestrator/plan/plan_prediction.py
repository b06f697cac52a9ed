"""A Plan's predicted time: the cost model with its cluster's constants, and the record the Plan
carries as ``estimates.predicted`` with its band (docs/plan.md)."""

from __future__ import annotations

import math
from dataclasses import replace
from typing import Any, Mapping, Optional

from sporch.orchestrator.contract.estimates_section import PhaseTimes, PredictedTime, StepBreakdown
from sporch.orchestrator.errors import SporchError
from sporch.orchestrator.plan.cost import TERMS, Prediction, predict
from sporch.orchestrator.plan.cost_band import prediction_band
from sporch.orchestrator.plan.cost_constants import cluster_constants
from sporch.orchestrator.plan.cost_inputs import compiles, inputs_from_plan


def predict_plan(plan: Any, constants: Optional[Mapping[str, float]] = None) -> Prediction:
    """Prediction for a Plan with the given constants (default: its cluster's)."""
    c = constants if constants is not None else cluster_constants(plan.cluster)[0]
    return predict(inputs_from_plan(plan), c)


def prediction_record(plan: Any) -> PredictedTime:
    """What the Plan records as ``estimates.predicted`` (docs/plan.md)."""
    consts, source = cluster_constants(plan.cluster)
    p = predict(inputs_from_plan(plan), consts)
    if not math.isfinite(p.job_s + p.step_s):  # every term adds into them: a bad one shows there
        times = {"step": p.step_s, "job": p.job_s, **p.breakdown(), **dict(p.phases)}
        bad = next((k for k, v in times.items() if not math.isfinite(v)), "job")
        # constants each finite but extreme (an efficiency of 1e-310, an overhead of 1e308)
        raise SporchError(f"the cost model's constants ({source}) predict a {bad} time of {times[bad]} s; "
                          "set them to realistic values (efficiencies near 0.1..1, latencies in seconds)")
    band, basis = _band(plan, source)
    return PredictedTime(
        step_s=round(p.step_s, 9),
        job_s=round(p.job_s, 9),
        fixed_s=p.fixed_s,
        decode_s=round(p.decode_s, 9),
        switch_s=round(p.switch_s, 9),
        breakdown_s_per_step=StepBreakdown(**{k: round(getattr(p, k), 9) for k in TERMS}),
        ring_comm_bound=p.ring_comm_bound,
        constants=source,
        band=band,
        band_basis=basis,
        phases_s=PhaseTimes(**{k: round(v, 6) for k, v in p.phases}),
        generation_s=round(p.generation_s, 9),
        gpu_hours=round(p.job_s * plan.world_size / 3600.0, 6),
    )


def _band(plan: Any, source: str) -> tuple[float, str]:
    """The band of a prediction made with the defaults (a calibration's own errors are its file's)."""
    if source.startswith("calibration"):
        return 0.0, ""
    return prediction_band(plan.cluster.gpu.model or "", compiles(plan))


def with_prediction(plan: Any) -> Any:
    """``plan`` with ``estimates.predicted`` filled in (the planner's last step)."""
    return replace(plan, estimates=replace(plan.estimates, predicted=prediction_record(plan)))
