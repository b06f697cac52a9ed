"""The metrics a campaign reports: name, unit, which direction is better, where it is read.

Every metric is read from a point's ``result.json`` (``metrics`` = rank 0's benchmark
record, written by sporch.orchestrator.contract.benchstats); nothing is recomputed from the plan.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Optional


@dataclass(frozen=True)
class Metric:
    name: str
    unit: str
    better: str  # "lower" | "higher"
    label: str


METRICS: tuple[Metric, ...] = (
    Metric("step_ms_median", "ms", "lower", "step median"),
    Metric("step_ms_p90", "ms", "lower", "step p90"),
    Metric("step_ms_min", "ms", "lower", "step min"),
    Metric("tokens_per_s", "tokens/s", "higher", "tokens/s"),
    Metric("comm_ms_per_step", "ms", "lower", "collectives"),
    Metric("peak_memory_gib", "GiB", "lower", "peak memory"),
    Metric("tflops_per_gpu", "TFLOP/s", "higher", "TFLOP/s per GPU"),
    Metric("peak_fraction", "fraction", "higher", "of peak"),
    Metric("comm_bytes_per_step", "bytes", "lower", "bytes sent per rank per step"),
    Metric("ideal_ms_per_step", "ms", "lower", "planner's ideal step"),
    Metric("predicted_ms_per_step", "ms", "lower", "cost model's predicted step"),
    Metric("prediction_error", "fraction", "lower", "predicted / measured step - 1"),
)

BY_NAME: dict[str, Metric] = {m.name: m for m in METRICS}

GIB = 1024**3


def metric_value(result: dict[str, Any], name: str) -> Optional[float]:
    """``name`` from a result.json dict (None when absent)."""
    metrics = result.get("metrics") or {}
    if name == "prediction_error":
        pred, measured = metric_value(result, "predicted_ms_per_step"), metric_value(result, "step_ms_median")
        return pred / measured - 1 if pred is not None and measured else None
    if name == "peak_memory_gib":
        raw = _number(metrics.get("peak_memory_bytes"))
        return None if raw is None else raw / GIB
    return _number(metrics.get(name))


def _number(value: Any) -> Optional[float]:
    """A JSON number as a float (NaN and infinities kept: a comparison must see them); None
    for anything else (text, a list, a bool) or a number too large for a float."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    try:
        return float(value)
    except OverflowError:
        return None


def is_worse(name: str, new: float, old: float, threshold: float) -> bool:
    """True when ``new`` is worse than ``old`` by more than ``threshold`` (a fraction)."""
    if old == 0:
        return False
    change = (new - old) / abs(old)
    return change > threshold if BY_NAME[name].better == "lower" else -change > threshold
