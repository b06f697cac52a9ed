"""Layouts ranked by predicted step time; ``auto``'s chooser.

Each candidate is planned for real by the function the planner hands in (``plan_layout``: a
layout -> its Plan, :func:`sporch.orchestrator.plan.planner.plan_with_layout`), so its memory
check, bytes and FLOPs are the planner's own; :mod:`.cost` predicts its time. This module does
not import the planner: the planner imports it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Optional

from sporch.orchestrator.plan.layouts import LayoutContext, compact, preference, short
from sporch.orchestrator.contract.estimates_section import PredictedTime
from sporch.orchestrator.contract.plan import Layout, Plan

#: A layout -> the Plan of the job with that layout (without the rank table and groups).
PlanLayout = Callable[[Layout], Plan]

#: Predictions closer than this (relative) to the fastest count as ties, broken by the old
#: preference (Ulysses inside a node, even heads, large Ulysses, then ring, cfg, dp): the
#: model cannot tell such layouts apart (docs/plan.md).
TIE = 0.02
#: At most this many candidates are planned and ranked (the most preferred by
#: :func:`~sporch.orchestrator.plan.layouts.preference`): a world with many divisors has hundreds of
#: feasible layouts, and each is a plan.
MAX_RANKED = 48


@dataclass(frozen=True)
class Ranked:
    layout: Layout
    plan: Plan  # without the rank table and groups (make_plan's tables=False)
    step_s: float
    job_s: float
    fits: bool

    @property
    def predicted(self) -> PredictedTime:
        return self.plan.estimates.predicted


def most_preferred(ctx: LayoutContext, layouts: list[Layout]) -> list[Layout]:
    """The :data:`MAX_RANKED` layouts of ``layouts`` that :func:`preference` likes best."""
    if len(layouts) <= MAX_RANKED:
        return layouts
    return sorted(layouts, key=lambda lay: preference(ctx, lay))[:MAX_RANKED]


def rank(plan_layout: PlanLayout, layouts: list[Layout]) -> list[Ranked]:
    """``layouts`` planned (by ``plan_layout``) and sorted: layouts that fit first, then by
    predicted step time."""
    out = []
    for lay in layouts:
        p = plan_layout(lay)
        pred = p.estimates.predicted
        out.append(Ranked(lay, p, pred.step_s, pred.job_s, bool(p.estimates.memory.fits)))
    return sorted(out, key=lambda r: (not r.fits, r.step_s))


def pick(ctx: LayoutContext, ranked: list[Ranked]) -> tuple[Ranked, str]:
    """The fastest predicted layout that fits (ties within TIE broken by the old preference), and
    a one-line reason."""
    fitting = [r for r in ranked if r.fits]
    pool = fitting or ranked
    best = min(pool, key=lambda r: r.step_s)
    ties = [r for r in pool if r.step_s <= best.step_s * (1 + TIE)]
    chosen = min(ties, key=lambda r: preference(ctx, r.layout))
    others = [r for r in pool if r is not chosen]
    what = f"{len(pool)} completions that fit" if fitting else f"{len(pool)} completions (none fits in memory)"
    reason = (f"auto chose {compact(chosen.layout)} ({short(chosen.layout)}): predicted "
              f"{chosen.step_s:.4g} s/step, fastest of {what}")
    if chosen is not best:
        reason += (f"; {compact(best.layout)} is predicted {best.step_s:.4g} s/step, within {TIE:.0%}, "
                   "so the layout preference (Ulysses inside a node, then ring) broke the tie")
    elif others:
        nxt = min(others, key=lambda r: r.step_s)
        gap = f" ({nxt.step_s / chosen.step_s - 1:+.0%})" if chosen.step_s > 0 else ""
        reason += f"; next {compact(nxt.layout)} {nxt.step_s:.4g} s/step{gap}"
    return chosen, reason


class FastestChooser:
    """``auto``'s chooser for :func:`sporch.orchestrator.plan.layouts.resolve_layout`: the fastest
    predicted of the candidates, each planned by ``plan_layout``; ``reason`` holds the one-line
    explanation after a choice among several completions."""

    def __init__(self, plan_layout: PlanLayout):
        self.plan_layout = plan_layout
        self.reason: Optional[str] = None

    def __call__(self, ctx: LayoutContext, candidates: list[Layout]) -> Layout:
        if len(candidates) == 1:
            return candidates[0]
        chosen, self.reason = pick(ctx, rank(self.plan_layout, most_preferred(ctx, candidates)))
        return chosen.layout
