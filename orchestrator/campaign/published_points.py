"""A campaign's points that repeat a published measurement (``plan/data/published.yaml``):
the published seconds beside the cost model's prediction and the point's own measurement.

A point matches a published case when its plan has the case's preset, workload shape, steps,
guidance, compile setting, a GPU of the same row of the cost model's table and one of the
measured layouts (:func:`sporch.orchestrator.plan.published.published_seconds`). The published
seconds are whole generations (all steps, text encoder and VAE); the point's measured figure is
its steps x median step (the denoising alone), so the two differ by the pipeline's fixed costs.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Sequence

from sporch.orchestrator.campaign.collect import Row
from sporch.orchestrator.campaign.folder import CampaignDir
from sporch.orchestrator.contract.plan import Plan
from sporch.orchestrator.contract.results import ResultFileError
from sporch.orchestrator.plan.published import published_seconds


def published_rows(root: str | Path, rows: Sequence[Row]) -> list[dict[str, Any]]:
    """One entry per completed point whose run a published case measured: id, layout, case,
    published_s, predicted_s (the plan's predicted generation: encode, steps, decode) and its error against the published
    seconds, measured_denoise_s (steps x median step, when measured)."""
    cdir = CampaignDir(Path(root))
    out = []
    for r in rows:
        if not r.ok:
            continue
        try:
            plan = Plan.load(str(cdir.plan_file(r.id)))
        except (OSError, ValueError, KeyError, TypeError, ResultFileError):
            continue  # no readable plan: the table and its status already say what is wrong
        found = published_seconds(plan)
        if found is None:
            continue
        case, seconds = found
        pred = plan.estimates.predicted if plan.estimates else None
        # one generation, its pipeline loaded, as the published tables time it (a plan before the
        # phases: its job, the steps and the decode)
        predicted = (pred.generation_s if pred.generation_s is not None else pred.job_s) if pred else None
        step_ms = r.metrics.get("step_ms_median")
        out.append({
            "id": r.id, "layout": r.values.get("layout"), "case": case, "published_s": seconds,
            "predicted_s": predicted, "predicted_error": predicted / seconds - 1 if predicted else None,
            "measured_denoise_s": step_ms * plan.workload.steps / 1e3 if step_ms else None,
        })
    return out
