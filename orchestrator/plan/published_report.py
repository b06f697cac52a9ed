"""``sporch predict``: the cost model against the published tables (``data/published.yaml``).

For each case (one machine, one model and workload, several layouts) and each measured layout:
the published seconds, the prediction with the GPU's default constants, and the prediction after
fitting ``PUBLISHED_FIT`` to that case alone, each with its relative error. Cases marked
``checked: false`` are shown with their note (what the model lacks for them).
"""

from __future__ import annotations

from typing import Any, Optional, Sequence

from sporch.orchestrator.errors import SporchError
from sporch.orchestrator.plan import published
from sporch.orchestrator.plan.calibration import fit, predicted_s
from sporch.orchestrator.plan.cost_constants import default_constants

#: The constants fitted per case (as tests/plan/test_cost_model.py does).
PUBLISHED_FIT = ("attention_efficiency", "a2a_latency_s", "ring_merge_bytes", "fixed_s")


def case_report(c: dict[str, Any]) -> dict[str, Any]:
    obs = published.observations(c)
    base = default_constants(c["gpu"]["model"])
    fitted = fit(obs, base, PUBLISHED_FIT)
    rows = []
    for o, after in zip(obs, fitted.predictions):
        before = predicted_s(o, base)
        rows.append({"layout": o.label, "measured_s": o.measured_s, "predicted_s": before,
                     "error": before / o.measured_s - 1, "fitted_s": after, "fitted_error": after / o.measured_s - 1})
    return {"name": c["name"], "source": c["source"], "section": c.get("section"), "checked": c.get("checked", True),
            "note": c.get("note"), "rows": rows}


def published_report(names: Optional[Sequence[str]] = None) -> list[dict[str, Any]]:
    """The report of the named cases (all when None); an unknown name is a one-line error."""
    known = [c["name"] for c in published.cases()]
    unknown = [n for n in names or () if n not in known]
    if unknown:
        raise SporchError(f"unknown published case {unknown[0]!r}; cases: {', '.join(known)}")
    return [case_report(c) for c in published.cases() if not names or c["name"] in names]
