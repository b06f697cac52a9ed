"""Tables of ``sporch campaign plan`` and ``campaign report`` that rest on the cost model: a
campaign's budget (predicted wall time and GPU-hours per point, per group and in total, with the
prediction's band) and a report's phases, measured beside predicted; and a metric's cell for
people (a fraction as a percentage, milliseconds never in exponent notation)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Optional, Sequence

from sporch.orchestrator.campaign.collect import short_value
from sporch.orchestrator.campaign.metrics import BY_NAME
from sporch.orchestrator.campaign.predicted_phases import phase_pairs
from sporch.orchestrator.cli.common import plain_table
from sporch.orchestrator.cli.show_prediction import gpu_hours_text, ms_text, seconds_text
from sporch.orchestrator.plan.phase_cost import PHASES


def metric_text(column: str, value: Any) -> str:
    """A report cell for people: a fraction as a signed percentage (``-94.7%``), milliseconds and
    seconds with a fixed number of decimals (``10,360``, ``86.5``), anything else as before."""
    metric = BY_NAME.get(column)
    if metric is None or not isinstance(value, float):
        return short_value(value)
    if metric.unit == "fraction":
        return f"{value:+.1%}" if column == "prediction_error" else f"{value:.1%}"
    if metric.unit in ("ms", "s"):
        return ms_text(value)
    return short_value(value)


@dataclass(frozen=True)
class Budget:
    """Predicted wall time and GPU-hours of points, and the band around the GPU-hours."""

    points: int
    job_s: float  # every point's job, one after another
    gpu_hours: float
    low: float  # each point's GPU-hours less its band
    high: float  # ... plus its band

    @classmethod
    def of(cls, plans: Sequence[Any]) -> "Budget":
        preds = [p.estimates.predicted for p in plans if p.estimates is not None and p.estimates.predicted is not None]
        hours = [(pr.gpu_hours or 0.0, pr.band) for pr in preds]
        return cls(points=len(plans), job_s=sum(pr.job_s for pr in preds), gpu_hours=sum(h for h, _ in hours),
                   low=sum(h * (1 - b) for h, b in hours), high=sum(h * (1 + b) for h, b in hours))

    def text(self) -> str:
        band = (f" ({gpu_hours_text(self.low)}..{gpu_hours_text(self.high)} at each point's band)"
                if self.high > self.low else " (no band: the cpu row or a calibration)")
        return (f"{self.points} points: {seconds_text(self.job_s)} of jobs one after another, "
                f"{gpu_hours_text(self.gpu_hours)} GPU-hours{band}")

    def to_dict(self) -> dict[str, Any]:
        return {"points": self.points, "job_s": round(self.job_s, 3), "gpu_hours": round(self.gpu_hours, 6),
                "gpu_hours_low": round(self.low, 6), "gpu_hours_high": round(self.high, 6)}


def point_budget(plan: Any) -> dict[str, Any]:
    """One point's predicted job, GPU-hours and phases for ``campaign plan --json``."""
    pred = plan.estimates.predicted
    phases = pred.phases_s
    return {"predicted_job_s": round(pred.job_s, 3), "gpu_hours": pred.gpu_hours,
            "phases_s": {k: getattr(phases, k) for k in PHASES} if phases is not None else None}


def budget_cells(plan: Any) -> tuple[str, str, str]:
    """(step ms with its band, the job's wall time, its GPU-hours) of a point for the plan table."""
    pred = plan.estimates.predicted
    step = ms_text(pred.step_s * 1e3) + (f" ±{pred.band:.0%}" if pred.band else "")
    return step, seconds_text(pred.job_s), gpu_hours_text(pred.gpu_hours or 0.0)


def phases_table(rows: Sequence[Any]) -> Optional[Any]:
    """The report's phases: per completed point that timed them, each phase's measured seconds and
    (after the slash) the cost model's prediction, the measured phases' total and its error
    (predicted / measured - 1). None when no point timed a phase (benchmark campaigns)."""
    phases, found = phase_pairs(rows)
    if not found:
        return None
    t = plain_table(title="phases: measured / predicted seconds (predicted: the point's plan.json)",
                    title_justify="left")
    for col in ("id", "layout", *phases, "total", "error"):
        t.add_column(col, justify="left" if col in ("id", "layout") else "right")
    for r, pairs in found:
        cells = []
        for ph in (*phases, "total"):
            m, p = pairs[ph]
            cells.append(f"{_s(m)} / {_s(p)}")
        m, p = pairs["total"]
        t.add_row(r.id, str(r.values.get("layout", "")), *cells, f"{p / m - 1:+.0%}" if m and p is not None else "-")
    return t


def _s(value: Optional[float]) -> str:
    return "-" if value is None else ms_text(value)
