"""The summary the campaign report opens with: per workload and GPU count, the fastest layout,
its speed-up over the default layout and over one GPU, the references passed and failed; and
the environment fingerprint the runs recorded.

Times are the median over repeats of each point's median step (as the plots). The default
layout of a point is the planner's (plan.layouts.default_sizes): ulysses = GPUs per node,
ring = nodes, dp = cfg = 1.
"""

from __future__ import annotations

import math
import statistics
from collections import defaultdict
from dataclasses import dataclass
from typing import Any, Optional, Sequence

from sporch.orchestrator.campaign.collect import LEVER_COLUMNS, Row
from sporch.orchestrator.campaign.references import FAIL, PASS
from sporch.orchestrator.contract.plan import Layout
from sporch.orchestrator.contract.results import Fingerprint


@dataclass(frozen=True)
class SizeSummary:
    """One line of the summary: a workload at one GPU count."""

    workload: str  # the parts that differ between the campaign's workloads ("" for one)
    gpus: int
    best_layout: Optional[str]  # None: no point of this size completed
    best_ms: Optional[float]
    default_layout: str
    default_ms: Optional[float]  # None: the default layout was not measured at this size
    one_gpu_ms: Optional[float]  # the fastest 1-GPU point of the workload (None: none)
    passed: int  # points (repeats counted) whose reference verdict is pass
    failed: int
    points: int

    @property
    def vs_default(self) -> Optional[float]:
        """Default layout's step / fastest step (1.0 when the default is the fastest)."""
        return _ratio(self.default_ms, self.best_ms)

    @property
    def vs_one_gpu(self) -> Optional[float]:
        """One GPU's step / fastest step at this size."""
        return _ratio(self.one_gpu_ms, self.best_ms)


@dataclass(frozen=True)
class FingerprintSummary:
    """What the runs' fingerprints hold: fields with one value in every run that recorded them,
    fields whose value differs between runs (every value seen), and how many runs had none."""

    same: tuple[tuple[str, str], ...]
    differing: tuple[tuple[str, tuple[str, ...]], ...]
    missing: int
    runs: int


#: Fingerprint fields that belong to the point, not to the environment (the summary's lines
#: already show the GPU count).
PER_POINT = frozenset({"gpu_count"})


def _ratio(num: Optional[float], den: Optional[float]) -> Optional[float]:
    if num is None or den is None or den <= 0:
        return None
    return num / den


def default_layout(nodes: int, gpus: int) -> str:
    """The planner's default layout for ``gpus`` GPUs on ``nodes`` nodes (its name)."""
    return Layout(ring=nodes, ulysses=gpus // nodes).name


def _finite(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)


def _count(v: Any) -> Optional[int]:
    return v if isinstance(v, int) and not isinstance(v, bool) and v > 0 else None


def _workload(row: Row) -> tuple[str, ...]:
    v = row.values
    return tuple(str(v.get(k) or "") for k in ("cluster", "preset", "shape", "dtype", *LEVER_COLUMNS))


def _valid_layout(text: Any) -> bool:
    try:
        Layout.from_name(str(text))
    except ValueError:
        return False
    return True


def sizes(rows: Sequence[Row]) -> list[SizeSummary]:
    """One SizeSummary per (workload, GPU count) that some point has, in workload then GPU order."""
    groups: dict[tuple, list[Row]] = defaultdict(list)
    for r in rows:
        gpus = _count(r.values.get("gpus"))
        if gpus is not None:
            groups[(_workload(r), gpus)].append(r)
    workloads = sorted({w for w, _ in groups})
    varying = [i for i in range(len(workloads[0])) if len({w[i] for w in workloads}) > 1] if workloads else []
    best_of: dict[tuple, tuple[float, str]] = {}
    default_of: dict[tuple, tuple[float, str]] = {}
    default_name: dict[tuple, str] = {}
    for key, members in groups.items():
        times: dict[tuple[str, bool], list[float]] = defaultdict(list)
        for r in members:
            nodes = _count(r.values.get("nodes"))
            layout = r.values.get("layout")
            if nodes is not None and key[1] % nodes == 0:
                default_name.setdefault(key, default_layout(nodes, key[1]))
            if r.ok and _finite(r.metrics.get("step_ms_median")) and _valid_layout(layout):
                is_default = nodes is not None and key[1] % nodes == 0 and layout == default_layout(nodes, key[1])
                times[(str(layout), is_default)].append(float(r.metrics["step_ms_median"]))
        medians = {k: statistics.median(v) for k, v in times.items()}
        if medians:
            (lay, _), ms = min(medians.items(), key=lambda kv: (kv[1], kv[0][0]))
            best_of[key] = (ms, lay)
        defaults = {k: ms for k, ms in medians.items() if k[1]}
        if defaults:
            (lay, _), ms = min(defaults.items(), key=lambda kv: (kv[1], kv[0][0]))
            default_of[key] = (ms, lay)
    out = []
    for key in sorted(groups):
        wl, gpus = key
        members = groups[key]
        best = best_of.get(key)
        default = default_of.get(key)
        one = best_of.get((wl, 1))
        out.append(SizeSummary(
            workload=" ".join(wl[i] for i in varying), gpus=gpus,
            best_layout=best[1] if best else None, best_ms=best[0] if best else None,
            default_layout=default[1] if default else default_name.get(key, ""),
            default_ms=default[0] if default else None, one_gpu_ms=one[0] if one else None,
            passed=sum(r.verdict == PASS for r in members), failed=sum(r.verdict == FAIL for r in members),
            points=len(members)))
    return out


def fingerprint(rows: Sequence[Row]) -> FingerprintSummary:
    """The fingerprints of the rows that have a result, field by field (named as
    :attr:`Fingerprint.LABELS` names them; ``env X`` per variable), less :data:`PER_POINT`."""
    runs = [r for r in rows if r.status not in ("pending", "unreadable")]
    seen: dict[str, list[str]] = {}
    missing = 0
    for r in runs:
        if r.fingerprint is None:
            missing += 1
            continue
        for k, v in r.fingerprint.flat().items():
            if v is None or k in PER_POINT:
                continue
            values = seen.setdefault(Fingerprint.LABELS.get(k, k), [])
            text = str(v).lower() if isinstance(v, bool) else str(v)
            if text not in values:
                values.append(text)
    same = tuple((k, vs[0]) for k, vs in seen.items() if len(vs) == 1)
    differing = tuple((k, tuple(vs)) for k, vs in seen.items() if len(vs) > 1)
    return FingerprintSummary(same=same, differing=differing, missing=missing, runs=len(runs))


def ratio_text(v: Optional[float]) -> str:
    """A speed-up for people: ``1.83x`` (empty when there is none)."""
    return "" if v is None else f"{v:.2f}x"
