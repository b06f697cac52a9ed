"""The cost model's absolute step times against steps measured on a GPU (``data/measured_steps.yaml``).

The leave-one-table-out validation (validation.py) scores ratios between layouts; the band it
gives (``estimates.predicted.band``) is what a layout comparison can claim. A prediction's absolute
time is a separate question, answered here: each measured point is planned as its run was (one GPU
of its cluster, its preset and workload, a benchmark step) and its predicted step is set beside the
measured one. :func:`ranges` turns sporch's own points into the per GPU row and mode range that
``data/fitted.yaml``'s ``absolute`` records and ``sporch plan`` prints beside the band
(``cost_band.prediction_band``); the reference implementation's points (``runtime: diffusers``) are
shown, not counted.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Sequence

from sporch.orchestrator.config.cluster import find_cluster
from sporch.orchestrator.config.job import job_from_dict
from sporch.orchestrator.plan.calibration import SharedFit
from sporch.orchestrator.plan.cost_constants import gpu_entry, prior_constants
from sporch.orchestrator.plan.data_tables import read_data_table
from sporch.orchestrator.plan.plan_prediction import predict_plan
from sporch.orchestrator.plan.planner import make_plan

__all__ = ["MEASURED_STEPS", "MeasuredStep", "measured_steps", "ranges"]

MEASURED_STEPS = Path(__file__).resolve().parent / "data" / "measured_steps.yaml"


@dataclass(frozen=True)
class MeasuredStep:
    """One measured point and the cost model's prediction for it."""

    name: str
    runtime: str  # sporch | diffusers
    gpu_row: str  # the cost model's GPU row (plan/data/gpus.yaml)
    compiled: bool
    measured_s: float
    predicted_s: float
    command: str

    @property
    def error(self) -> float:
        """measured / predicted - 1: +0.3 = the run took 30% longer than predicted."""
        return self.measured_s / self.predicted_s - 1.0


def _plan(point: dict[str, Any]):
    cluster = dataclasses.replace(find_cluster(point["cluster"]), nodes=1, gpus_per_node=1)
    job = job_from_dict({"name": point["name"], "model": {"preset": point["model"]},
                         "workload": {"kind": "benchmark", "dtype": "bfloat16", **point["workload"]},
                         "parallel": {"dp": 1, "cfg": 1, "ring": 1, "ulysses": 1}}, source=str(MEASURED_STEPS))
    return make_plan(cluster, job)


def measured_steps(fit: SharedFit | None = None, path: Path = MEASURED_STEPS) -> list[MeasuredStep]:
    """Every point of ``path`` with its predicted step: by its cluster's constants (the shipped
    defaults, ``data/fitted.yaml``), or by ``fit`` applied to the GPU row's priors (a fit about to
    be written: --write-fit)."""
    out = []
    for p in read_data_table(path)["points"]:
        plan = _plan(p)
        gpu = plan.cluster.gpu.model
        constants = fit.constants(prior_constants(gpu)) if fit is not None else None
        out.append(MeasuredStep(name=p["name"], runtime=p["runtime"], gpu_row=gpu_entry(gpu)["name"],
                                compiled=bool(p["workload"]["compile"]), measured_s=float(p["ms"]) / 1e3,
                                predicted_s=predict_plan(plan, constants).step_s,
                                command=p["command"]))
    return out


def ranges(points: Sequence[MeasuredStep]) -> dict[str, dict[str, list[float]]]:
    """Per GPU row and mode ("eager", "compiled"): [lowest, highest] error of sporch's own points
    (rounded to 0.001), what ``data/fitted.yaml``'s ``absolute`` holds."""
    out: dict[str, dict[str, list[float]]] = {}
    for p in points:
        if p.runtime != "sporch":
            continue
        row, mode = out.setdefault(p.gpu_row, {}), "compiled" if p.compiled else "eager"
        lo, hi = row.get(mode, [p.error, p.error])
        row[mode] = [min(lo, p.error), max(hi, p.error)]
    return {g: {m: [round(lo, 3), round(hi, 3)] for m, (lo, hi) in modes.items()} for g, modes in out.items()}
