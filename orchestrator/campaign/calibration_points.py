"""A campaign's measured points as observations for the cost model's fit (``sporch calibrate``).

Measured: ``step_ms_median`` of each completed point's result.json, and a generate point's phases
(``metrics.stages``: startup, load, encode, denoise, decode, save; each an observation of its
phase, denoise only where no step median was measured); what the model needs of the point: its
plan.json (:func:`sporch.orchestrator.plan.cost_inputs.inputs_from_plan`). The fit itself is
:mod:`sporch.orchestrator.plan.calibration`.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Any, Iterable, Optional

from sporch.orchestrator.campaign.collect import collect
from sporch.orchestrator.campaign.folder import CampaignDir
from sporch.orchestrator.contract.plan import Plan
from sporch.orchestrator.safe_files import NotAFileError
from sporch.orchestrator.errors import SporchError
from sporch.orchestrator.plan.calibration import Observation
from sporch.orchestrator.plan.cost_inputs import inputs_from_plan
from sporch.orchestrator.plan.phase_cost import PHASES


def campaign_observations(directory: str | Path, cluster: Optional[str] = None, exclude: Iterable[str] = ()
                          ) -> tuple[list[Observation], Any]:
    """(observations, the cluster descriptor of their plans) of a campaign's completed points.

    All points must share one cluster (``cluster`` picks one when the campaign spans several);
    points whose id is in ``exclude`` are left out (held back to check the fit)."""
    cdir = CampaignDir(Path(directory))
    skip = set(exclude)
    rows = [r for r in collect(directory, references=[])
            if r.ok and (r.metrics.get("step_ms_median") or _phases(r)) and r.id not in skip]
    clusters = sorted({str(r.values["cluster"]) for r in rows})
    if cluster is not None:
        rows = [r for r in rows if str(r.values["cluster"]) == cluster]
        if not rows:
            raise SporchError(f"{directory}: no completed point on cluster {cluster!r} (clusters: "
                              f"{', '.join(clusters) or 'none'})")
    elif len(clusters) > 1:
        raise SporchError(f"{directory} has points on {len(clusters)} clusters ({', '.join(clusters)}); "
                          "pick one with --cluster NAME")
    if not rows:
        raise SporchError(f"{directory} has no completed point with a measured step time or phases; run the "
                          "campaign first")
    plans, obs = [], []
    for r in rows:
        plan, inputs = _point_plan(cdir.plan_file(r.id))
        plans.append(plan)
        label = f"{r.id} {r.values['layout']}"
        step_ms = r.metrics.get("step_ms_median")
        if step_ms:
            obs.append(Observation(inputs, step_ms / 1e3, "step", label))
        for phase, seconds in _phases(r).items():
            if phase != "denoise" or not step_ms:  # the steps once: their median where measured
                obs.append(Observation(inputs, seconds, phase, f"{label} {phase}"))
    # a phase's residuals relative to its mean over the points: repeated runs of a job fit their
    # mean (what a budget adds up), not their fastest run, as relative errors of each would
    means = {}
    for o in obs:
        if o.level != "step":
            means.setdefault(o.level, []).append(o.measured_s)
    obs = [replace(o, scale_s=sum(means[o.level]) / len(means[o.level])) if o.level != "step" else o for o in obs]
    return obs, plans[0].cluster


def _phases(row: Any) -> dict[str, float]:
    """A completed point's measured phases (``metrics.stages``: ``stage_<phase>_s``), in PHASES order."""
    out = {}
    for phase in PHASES:
        seconds = row.metrics.get(f"stage_{phase}_s")
        if seconds is not None and seconds > 0:
            out[phase] = float(seconds)
    return out


def _point_plan(path: Path) -> tuple[Plan, Any]:
    """A point's Plan and the cost model's inputs from it; a file that is not a Plan sporch wrote
    (replaced, truncated, a FIFO) is one line naming it."""
    try:
        plan = Plan.load(str(path))
        return plan, inputs_from_plan(plan)
    except FileNotFoundError:
        raise SporchError(f"{path} is missing: the point was measured but its plan is gone; run the campaign "
                          "again (`sporch campaign run`) or leave the point out with --exclude") from None
    except (OSError, ValueError, KeyError, TypeError, AttributeError, IndexError) as exc:
        why = ("not a regular file" if isinstance(exc, NotAFileError)
               else getattr(exc, "strerror", None) or type(exc).__name__)
        raise SporchError(f"{path} is not a plan sporch can read ({why}); run the campaign again "
                          "(`sporch campaign run`) or leave the point out with --exclude") from None
