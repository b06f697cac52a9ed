"""A campaign point's predicted phases (its plan.json's ``estimates.predicted``) as report metrics
(``metrics.PREDICTED_METRICS``), beside the phases its run measured (``metrics.stages``), and the
two set side by side for the report's phase table."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any, Optional, Sequence

from sporch.orchestrator.campaign.metrics import RUN_PHASES
from sporch.orchestrator.contract.results import ResultFileError, read_bounded_text


def predicted_metrics(plan_file: Path) -> dict[str, float]:
    """``predicted_<phase>_s``, ``predicted_job_s`` and ``predicted_gpu_hours`` of a point's plan.json;
    {} for a plan without them (written before the phases, or unreadable: the report shows the
    point's other columns, and its status says what is wrong with its files)."""
    try:
        doc = json.loads(read_bounded_text(plan_file))
    except (OSError, ValueError, ResultFileError):
        return {}
    pred = (doc.get("estimates") or {}).get("predicted") if isinstance(doc, dict) else None
    if not isinstance(pred, dict) or not isinstance(pred.get("phases_s"), dict):
        return {}
    out = {f"predicted_{ph}_s": _number(pred["phases_s"].get(ph)) for ph in RUN_PHASES}
    out["predicted_job_s"] = _number(pred.get("job_s"))
    out["predicted_gpu_hours"] = _number(pred.get("gpu_hours"))
    return {k: v for k, v in out.items() if v is not None}


def _number(value: Any) -> Optional[float]:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        return None
    return float(value)


def phase_pairs(rows: Sequence[Any]) -> tuple[list[str], list[tuple[Any, dict[str, tuple[Optional[float], Optional[float]]]]]]:
    """(the phases some completed row measured, per such row its {phase: (measured, predicted)}),
    the measured phases' sum as ``total`` against the prediction of the same phases."""
    done = [r for r in rows if r.ok and any(r.metrics.get(f"stage_{ph}_s") is not None for ph in RUN_PHASES)]
    phases = [ph for ph in RUN_PHASES if any(r.metrics.get(f"stage_{ph}_s") is not None for r in done)]
    out = []
    for r in done:
        pairs = {ph: (r.metrics.get(f"stage_{ph}_s"), r.metrics.get(f"predicted_{ph}_s")) for ph in phases}
        both = [(m, p) for m, p in pairs.values() if m is not None and p is not None]
        pairs["total"] = (sum(m for m, _ in both), sum(p for _, p in both)) if both else (None, None)
        out.append((r, pairs))
    return phases, out
