"""Every reference a campaign's points were checked against, one line each: what a reader of a
reproduction wants after the run -- which published figures it met, which it missed, and by how
much (the measured value over the reference value).

One :class:`Check` per (point, metric) a reference applies to (:mod:`.references` selects them,
:mod:`.collect` gives the verdicts); a point that ran and did not complete fails its references
(measured None). Pending points (not run yet) are counted apart, never as passed.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional, Sequence

from sporch.orchestrator.campaign.collect import PENDING, Row
from sporch.orchestrator.campaign.references import FAIL, PASS


@dataclass(frozen=True)
class Check:
    id: str
    gpus: int
    layout: str
    metric: str
    reference: float
    band: str  # the reference as text: value, unit and tolerances
    low: float
    high: float
    measured: Optional[float]
    verdict: str  # pass | fail | pending
    status: str  # the point's status

    @property
    def ratio(self) -> Optional[float]:
        """measured / reference (None: nothing measured, or a reference of 0)."""
        if self.measured is None or not self.reference:
            return None
        return self.measured / self.reference

    @property
    def why(self) -> str:
        if self.verdict == "pending":
            return "not run yet"
        if self.measured is None:
            return f"no measurement (the point {self.status})" if self.status != "completed" else "not measured"
        if self.verdict == PASS:
            return "within the band"
        return "above the band" if self.measured > self.high else "below the band"


def checks(rows: Sequence[Row]) -> list[Check]:
    """One Check per point and referenced metric, in the rows' order."""
    out = []
    for r in rows:
        for metric, bound in r.bounds.items():
            lo, hi = bound.limits()
            verdict = r.verdicts.get(metric, "")
            measured = r.metrics.get(metric) if r.ok else None
            out.append(Check(id=r.id, gpus=int(r.values.get("gpus") or 0), layout=str(r.values.get("layout")),
                             metric=metric, reference=bound.value, band=bound.text(), low=lo, high=hi,
                             measured=measured, verdict=verdict if verdict in (PASS, FAIL) else "pending",
                             status=r.status))
    return out


def pending_rows(rows: Sequence[Row]) -> list[Row]:
    """Points not run yet: their references are neither passed nor failed."""
    return [r for r in rows if r.status == PENDING]


def counts(found: Sequence[Check]) -> dict[str, int]:
    return {v: sum(c.verdict == v for c in found) for v in (PASS, FAIL, "pending")}
