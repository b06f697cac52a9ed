"""Reference values in the manner of ReFrame: ``metric: [value, lower, upper, unit]``.

``lower`` and ``upper`` are fractions of ``value`` (``-0.1`` = 10 % below; ``null`` =
unbounded on that side); a measurement passes when it lies in
``[value * (1 + lower), value * (1 + upper)]``. An entry applies to a point when its
``cluster`` (name or glob) and every key of ``where`` match the point's parameters. When
several entries give the same metric, the most specific wins (more ``where`` keys, then an
exact cluster name), later entries breaking ties.
"""

from __future__ import annotations

import fnmatch
from dataclasses import dataclass, field
from typing import Any, Iterable, Optional

from sporch.orchestrator.campaign.metrics import BY_NAME
from sporch.orchestrator.errors import SporchError

#: Point parameters a reference's ``where`` may name (see expand.Point.match_values).
WHERE_KEYS = ("nodes", "gpus", "layout", "preset", "shape", "dtype", "repeat")

PASS, FAIL, NONE = "pass", "fail", "none"


@dataclass(frozen=True)
class Bound:
    value: float
    lower: Optional[float]
    upper: Optional[float]
    unit: str

    def limits(self) -> tuple[float, float]:
        lo = -float("inf") if self.lower is None else self.value * (1 + self.lower)
        hi = float("inf") if self.upper is None else self.value * (1 + self.upper)
        return (min(lo, hi), max(lo, hi))

    def check(self, measured: Optional[float]) -> str:
        if measured is None:
            return FAIL
        lo, hi = self.limits()
        return PASS if lo <= measured <= hi else FAIL

    def text(self) -> str:
        lo = "-inf" if self.lower is None else f"{self.lower:+.0%}"
        hi = "+inf" if self.upper is None else f"{self.upper:+.0%}"
        return f"{self.value:g} {self.unit} ({lo}/{hi})"


@dataclass(frozen=True)
class Reference:
    cluster: str
    where: dict = field(default_factory=dict)
    metrics: dict = field(default_factory=dict)  # metric -> Bound
    index: int = 0

    def applies(self, values: dict[str, Any]) -> bool:
        if not fnmatch.fnmatchcase(str(values.get("cluster", "")), self.cluster):
            return False
        return all(str(values.get(k)) == str(v) for k, v in self.where.items())

    def specificity(self) -> tuple[int, int, int]:
        return (len(self.where), 0 if any(c in self.cluster for c in "*?[") else 1, self.index)


def parse_references(specs: Iterable[Any], source: str) -> list[Reference]:
    out: list[Reference] = []
    for i, ref in enumerate(specs):
        key = f"references[{i}]"
        for w in ref.where:
            if w not in WHERE_KEYS:
                raise SporchError(f"{source}: '{key}.where' unknown key {w!r}; use {', '.join(WHERE_KEYS)}")
        if not ref.metrics:
            raise SporchError(f"{source}: '{key}.metrics' is empty; give metric: [value, lower, upper, unit]")
        bounds: dict[str, Bound] = {}
        for name, raw in ref.metrics.items():
            mkey = f"{key}.metrics.{name}"
            if name not in BY_NAME:
                raise SporchError(f"{source}: '{mkey}' unknown metric; metrics: {', '.join(BY_NAME)}")
            bounds[name] = _bound(raw, BY_NAME[name].unit, source, mkey)
        out.append(Reference(cluster=str(ref.cluster), where=dict(ref.where), metrics=bounds, index=i))
    return out


def _number(v: Any) -> Optional[float]:
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        return None
    return float(v)


def _bound(raw: Any, unit: str, source: str, key: str) -> Bound:
    shape = f"must be [value, lower, upper, unit] like [120.0, -0.1, 0.1, {unit}]"
    if not isinstance(raw, (list, tuple)) or len(raw) != 4:
        raise SporchError(f"{source}: '{key}' {shape}, got {raw!r}")
    value, lower, upper, given_unit = raw
    if _number(value) is None:
        raise SporchError(f"{source}: '{key}' value {value!r} is not a number; {shape}")
    for name, v in (("lower", lower), ("upper", upper)):
        if v is not None and _number(v) is None:
            raise SporchError(f"{source}: '{key}' {name} {v!r} is not a number or null; {shape}")
    if lower is not None and lower > 0:
        raise SporchError(f"{source}: '{key}' lower {lower} must be <= 0 (a fraction below the value)")
    if upper is not None and upper < 0:
        raise SporchError(f"{source}: '{key}' upper {upper} must be >= 0 (a fraction above the value)")
    if lower is None and upper is None:
        raise SporchError(f"{source}: '{key}' has neither a lower nor an upper bound, so every measurement "
                          f"would pass; give at least one, e.g. [{value}, -0.1, 0.1, {unit}]")
    if str(given_unit) != unit:
        raise SporchError(f"{source}: '{key}' unit {given_unit!r} does not match the metric's unit {unit!r}")
    return Bound(float(value), _number(lower), _number(upper), unit)


def select(references: list[Reference], values: dict[str, Any]) -> dict[str, Bound]:
    """metric -> the Bound that applies to a point with these parameter ``values``."""
    chosen: dict[str, tuple[tuple, Bound]] = {}
    for ref in references:
        if not ref.applies(values):
            continue
        spec = ref.specificity()
        for name, bound in ref.metrics.items():
            if name not in chosen or spec >= chosen[name][0]:
                chosen[name] = (spec, bound)
    return {name: b for name, (_, b) in chosen.items()}


def evaluate(bounds: dict[str, Bound], measured: dict[str, Optional[float]]) -> dict[str, str]:
    """metric -> pass | fail | none, for every metric in ``measured`` and every bound."""
    out = {name: NONE for name in measured}
    for name, bound in bounds.items():
        out[name] = bound.check(measured.get(name))
    return out
