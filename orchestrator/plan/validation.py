"""Leave-one-table-out validation of the cost model on the published tables.

A published table (a case of ``data/published.yaml``: one source, GPU, model, eager or
compiled, a set of layouts) is one unit. For each table: fit the shared constants
(:data:`SHARED_FIT`, :func:`~sporch.orchestrator.plan.calibration.fit_shared`) to every *other*
table, starting from the GPU rows' priors (``data/gpus.yaml``, no fit in them), and predict the
held-out table. Per table it reports

* the pairs of layouts measured more than :data:`ORDER_MARGIN` apart, and how many of them the
  prediction orders rightly;
* the largest ratio error against the table's fastest point: for each layout t and the fastest
  measured f, (predicted t / predicted f) / (measured t / measured f) - 1. A ratio is what a
  layout decision rests on, and it is blind to what a source leaves unsaid about the whole run
  (its step count, say).

:func:`all_tables_fit` is the one fit to every table that the GPU rows' defaults carry
(``data/fitted.yaml``, applied by :func:`~sporch.orchestrator.plan.cost_constants.default_constants`).
:func:`bands` turns the held-out errors into the band ``sporch plan`` shows per GPU and mode.
docs/plan.md has the table and what each term is for.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from typing import Any, Iterable, Optional, Sequence

from sporch.orchestrator.plan import published
from sporch.orchestrator.plan.calibration import RELATIVE_L2, Objective, Observation, SharedFit, fit_shared, predicted_s
from sporch.orchestrator.plan.cost import predict
from sporch.orchestrator.plan.cost_constants import SHARED_FIT, default_constants, gpu_entry, prior_constants

#: Measured pairs closer than this (relative) are ties the model is not asked to order.
ORDER_MARGIN = 0.10
#: A held-out table reaches the goal when every pair is ordered and every ratio error is within this.
GOAL_RATIO_ERROR = 0.20


@dataclass(frozen=True)
class Row:
    layout: str
    measured_s: float
    predicted_s: float
    ratio_error: float  # (predicted / predicted fastest) / (measured / measured fastest) - 1


@dataclass(frozen=True)
class TableScore:
    name: str
    gpu: str  # the GPU table's row
    compiled: bool
    pairs: int  # measured more than ORDER_MARGIN apart
    ordered: int  # of them, predicted in the measured order
    max_ratio_error: float  # the largest |ratio error| of the table's layouts
    rows: tuple[Row, ...]
    #: an end-to-end table (seconds per generation) judged on the same fit's steps alone: the
    #: largest ratio error without the phases around the denoising (None: a table of step times)
    denoise_only_error: Optional[float] = None
    #: of the prediction of the table's most parallel layout, the share not spent denoising
    phase_share: Optional[float] = None

    @property
    def end_to_end(self) -> bool:
        return self.denoise_only_error is not None

    @property
    def explained(self) -> Optional[float]:
        """Points of the largest ratio error the phases around the denoising take away (negative:
        they add to it)."""
        return None if self.denoise_only_error is None else self.denoise_only_error - self.max_ratio_error

    def to_dict(self) -> dict[str, Any]:
        out = {"name": self.name, "gpu": self.gpu, "compiled": self.compiled, "pairs": self.pairs,
               "ordered": self.ordered, "max_ratio_error": round(self.max_ratio_error, 4),
               "rows": [{"layout": r.layout, "measured_s": r.measured_s, "predicted_s": round(r.predicted_s, 6),
                         "ratio_error": round(r.ratio_error, 4)} for r in self.rows]}
        if self.end_to_end:
            out.update(end_to_end=True, denoise_only_error=round(self.denoise_only_error, 4),
                       phases_explained=round(self.explained, 4), phase_share=round(self.phase_share or 0.0, 4))
        return out


def _ratio_rows(obs: Sequence[Observation], predictions: Sequence[float]) -> tuple[Row, ...]:
    fastest = min(range(len(obs)), key=lambda i: obs[i].measured_s)
    mf, pf = obs[fastest].measured_s, predictions[fastest]
    return tuple(Row(o.label, o.measured_s, p, (p / pf) / (o.measured_s / mf) - 1) for o, p in zip(obs, predictions))


def score(case: dict[str, Any], obs: Sequence[Observation], predictions: Sequence[float],
          denoise: Optional[Sequence[float]] = None) -> TableScore:
    """The figures of one table from its observations and their predictions; ``denoise``: the
    same predictions' denoising steps alone (an end-to-end table), to say what the rest explains."""
    rows = _ratio_rows(obs, predictions)
    pairs = [(i, j) for i in range(len(obs)) for j in range(len(obs))
             if obs[i].measured_s < obs[j].measured_s * (1 - ORDER_MARGIN)]
    ordered = sum(1 for i, j in pairs if predictions[i] < predictions[j])
    only = share = None
    if denoise is not None:
        only = max(abs(r.ratio_error) for r in _ratio_rows(obs, denoise))
        widest = max(range(len(obs)), key=lambda i: (obs[i].inputs.ring * obs[i].inputs.ulysses, -obs[i].measured_s))
        share = 1 - denoise[widest] / predictions[widest] if predictions[widest] else 0.0
    return TableScore(case["name"], gpu_entry(case["gpu"]["model"])["name"], bool(case["compile"]), len(pairs),
                      ordered, max(abs(r.ratio_error) for r in rows), rows, only, share)


def judged(case: dict[str, Any], obs: Sequence[Observation], consts_of) -> TableScore:
    """``score`` of a table predicted with ``consts_of(observation)``'s constants: an end-to-end
    table (``level`` job) end to end, and by its steps alone beside it."""
    preds = [predict(o.inputs, consts_of(o)) for o in obs]
    full = [predicted_s(o, consts_of(o)) for o in obs]
    denoise = [o.inputs.steps * p.step_s for o, p in zip(obs, preds)] if published.level(case) == "job" else None
    return score(case, obs, full, denoise)


def _tables(names: Optional[Iterable[str]] = None) -> list[tuple[dict[str, Any], list[Observation], dict[str, float]]]:
    wanted = set(names) if names is not None else None
    return [(c, published.observations(c), prior_constants(c["gpu"]["model"]))
            for c in published.checked_cases() if wanted is None or c["name"] in wanted]


#: Rounds of the alternation between the fit and the free scales of tables without a known
#: absolute time (``absolute: false``).
SCALE_ROUNDS = 3


@dataclass(frozen=True)
class FitChoice:
    """How the tables enter the shared fit: ``objective`` (calibration.Objective); ``table_weight``:
    each observation weighted 1 / (points of its table) ** table_weight (0: every point weighs the
    same; 1: every table does); ``ratios_only``: every table lends only its ratios (a free scale
    each, as ``absolute: false`` tables); ``scale_rounds``: rounds of the alternation with the free
    scales."""

    objective: Objective = RELATIVE_L2
    table_weight: float = 0.0
    ratios_only: bool = False
    scale_rounds: int = SCALE_ROUNDS


#: The shipped choice (docs/plan.md, "Fourth pass": the objectives tried).
DEFAULT_CHOICE = FitChoice()


def table_weights(sizes: Sequence[int], power: float) -> list[float]:
    """One weight per point of tables of ``sizes`` points: 1 / (points of its table) ** ``power``,
    scaled to a mean of 1 (power 1: each table's points weigh as much in all as another's)."""
    raw = [n ** -power for n in sizes for _ in range(n)]
    return [x * len(raw) / sum(raw) for x in raw]


def _fit(tables, names: Sequence[str], choice: FitChoice = DEFAULT_CHOICE) -> SharedFit:
    """One shared fit to ``tables``. A table marked ``absolute: false`` (its source leaves the step
    count or size unsaid) lends only its ratios: its times are divided by a free factor, the
    geometric mean of measured / predicted, refitted in turn (``choice.scale_rounds``)."""
    bases = [b for _, os, b in tables for _ in os]
    weights = table_weights([len(os) for _, os, _ in tables], choice.table_weight) if choice.table_weight else None
    scale = {c["name"]: 1.0 for c, _, _ in tables}
    free = [c["name"] for c, _, _ in tables if choice.ratios_only or c.get("absolute") is False]
    for _ in range(choice.scale_rounds if free else 1):
        obs = [replace(o, measured_s=o.measured_s / scale[c["name"]]) for c, os, _ in tables for o in os]
        fitted = fit_shared(obs, bases, names, weights=weights, objective=choice.objective)
        if not free:
            break
        for c, os, base in tables:
            if c["name"] in free:
                consts = fitted.constants(base)
                logs = [math.log(o.measured_s / predicted_s(o, consts)) for o in os]
                scale[c["name"]] = math.exp(sum(logs) / len(logs))
    return fitted


def all_tables_fit(names: Sequence[str] = SHARED_FIT, cases: Optional[Iterable[str]] = None,
                   choice: FitChoice = DEFAULT_CHOICE) -> SharedFit:
    """The shared constants fitted to every checked table (the shipped defaults' fit)."""
    return _fit(_tables(cases), names, choice)


def leave_one_table_out(names: Sequence[str] = SHARED_FIT, cases: Optional[Iterable[str]] = None,
                        choice: FitChoice = DEFAULT_CHOICE) -> list[TableScore]:
    """Each checked table predicted by a fit to all the others."""
    tables = _tables(cases)
    out = []
    for i, (c, obs, base) in enumerate(tables):
        fitted = _fit(tables[:i] + tables[i + 1:], names, choice)
        consts = fitted.constants(base)
        out.append(judged(c, obs, lambda o: consts))
    return out


def with_defaults(cases: Optional[Iterable[str]] = None) -> list[TableScore]:
    """Each checked table predicted by the shipped default constants (fitted to all tables: the
    figures flatter; the honest ones are :func:`leave_one_table_out`'s)."""
    out = []
    for c, obs, _ in _tables(cases):
        consts = default_constants(c["gpu"]["model"])
        out.append(judged(c, obs, lambda o: consts))
    return out


def bands(scores: Sequence[TableScore]) -> dict[str, dict[str, float]]:
    """The held-out ratio error a prediction carries, per GPU row and mode ("eager", "compiled"):
    the largest of that GPU's and mode's held-out tables; "*" (a GPU without a table of that
    mode): the largest of every table of the mode."""
    out: dict[str, dict[str, float]] = {}
    for s in scores:
        mode = "compiled" if s.compiled else "eager"
        for gpu in (s.gpu, "*"):
            row = out.setdefault(gpu, {})
            row[mode] = max(row.get(mode, 0.0), round(s.max_ratio_error, 3))
    return out


def _written(x: float) -> float:
    """A fitted number as ``data/fitted.yaml`` holds it: four significant digits."""
    return float(f"{x:.4g}")


def as_written(fit: SharedFit) -> SharedFit:
    """``fit`` with its numbers as ``data/fitted.yaml`` holds them, so that what is predicted with
    it before writing (the absolute check's ranges) is what the shipped defaults predict after."""
    return replace(fit, scales={k: _written(x) for k, x in fit.scales.items()},
                   values={k: _written(x) for k, x in fit.values.items()})


def fitted_text(fit: SharedFit, scores: Sequence[TableScore],
                absolute: dict[str, dict[str, list[float]]] | None = None) -> str:
    """``data/fitted.yaml``'s text for ``fit``, the held-out ``scores``' :func:`bands` and the
    ``absolute`` error ranges of measured steps (absolute_check.ranges; bench/published_validation.py
    --write-fit writes it)."""
    import yaml

    fit = as_written(fit)
    doc = {"scales": fit.scales, "values": fit.values,
           "bands": bands(scores)}
    if absolute:
        doc["absolute"] = absolute
    head = ("# The cost model's constants fitted to every published table at once (plan/validation.py,\n"
            "# all_tables_fit; regenerate with `python bench/published_validation.py --write-fit`).\n"
            "# scales: multiply each GPU row's prior efficiency; values: one value for every GPU row but cpu.\n"
            "# bands: per GPU row and mode, the largest held-out ratio error (what `sporch plan` shows as +/-).\n"
            "# absolute: per GPU row and mode, [lowest, highest] of measured / predicted - 1 over sporch's own\n"
            "# steps in measured_steps.yaml (plan/absolute_check.py; `sporch plan` shows it beside the band).\n"
            f"# Held at a bound by the fit: {', '.join(fit.held) or 'none'}.\n")
    return head + yaml.safe_dump(doc, sort_keys=False)
