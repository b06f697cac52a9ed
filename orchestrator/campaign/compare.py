"""Regressions between two campaign directories: same point id, a metric worse by more than
a threshold (lower-is-better metrics up, higher-is-better ones down)."""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Optional

from sporch.orchestrator.campaign.collect import collect
from sporch.orchestrator.campaign.metrics import METRICS, is_worse
from sporch.orchestrator.errors import SporchError


@dataclass(frozen=True)
class Change:
    id: str
    values: dict
    metric: str
    old: float
    new: Optional[float]  # None: B has no such metric
    #: what changed in the run's fingerprint from A to B ("NCCL 2.21.5 -> 2.23.4"); empty: nothing
    #: recorded changed (or a run has no fingerprint: ``fingerprinted`` False)
    changed: tuple[str, ...] = ()
    fingerprinted: bool = False

    @property
    def broken(self) -> bool:
        """B lost a metric A had (missing, NaN or infinite): a failure of its own, whatever the threshold."""
        return self.new is None or not math.isfinite(self.new)

    @property
    def relative(self) -> float:
        if self.broken:
            return float("nan")
        return (self.new - self.old) / abs(self.old) if self.old else float("inf")


def parse_threshold(text: str) -> float:
    """``5%`` or ``0.05`` -> 0.05."""
    raw = text.strip()
    try:
        value = float(raw[:-1]) / 100 if raw.endswith("%") else float(raw)
    except ValueError:
        raise SporchError(f"--threshold {text!r} is not a number or a percentage (e.g. 5% or 0.05)") from None
    if not math.isfinite(value) or value < 0:  # nan would pass every comparison: the gate switched off
        raise SporchError(f"--threshold {text!r} must be a finite number >= 0 (e.g. 5% or 0.05)")
    return value


def compare(old_dir: str | Path, new_dir: str | Path, threshold: float) -> tuple[list[Change], int]:
    """(regressions, number of points compared). Only points completed in both count. A metric
    A has (a finite number) that B lacks or holds as NaN or an infinity is a change of its own
    (:attr:`Change.broken`), never "no regression"."""
    old = {r.id: r for r in collect(old_dir, references=[]) if r.ok}
    new = {r.id: r for r in collect(new_dir, references=[]) if r.ok}
    common = sorted(set(old) & set(new))
    out: list[Change] = []
    for pid in common:
        for m in METRICS:
            a, b = old[pid].metrics.get(m.name), new[pid].metrics.get(m.name)
            if a is None or not math.isfinite(a) or m.name == "ideal_ms_per_step":
                continue
            if b is None or not math.isfinite(b) or is_worse(m.name, b, a, threshold):
                out.append(Change(pid, new[pid].values, m.name, a, b, *fingerprint_change(old[pid], new[pid])))
    return out, len(common)


def fingerprint_change(old: Any, new: Any) -> tuple[tuple[str, ...], bool]:
    """(what changed in the fingerprint from ``old``'s run to ``new``'s, both runs have one)."""
    a, b = getattr(old, "fingerprint", None), getattr(new, "fingerprint", None)
    if a is None or b is None:
        return (), False
    return tuple(a.differences(b)), True
