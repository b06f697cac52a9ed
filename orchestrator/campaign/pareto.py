"""Speed against quality (issue 36): which points no other point beats on both.

A point is Pareto-optimal when no other compared point is at least as fast *and* at least as
close to the reference (PSNR), and strictly better in one. Speed is the denoise stage's seconds
(generate points: what a step count, a cache or a kernel changes as a whole), else the median
step time; quality is the PSNR of the decoded frames against the campaign's reference point
(identical frames: infinite). Pure: rows in, ids out.
"""

from __future__ import annotations

import math
from typing import Any, Optional, Sequence

#: The report column that marks the optimal points.
COLUMN = "pareto"


def speed_s(row: Any) -> Optional[float]:
    """The point's time: the denoise stage's seconds, else the median step time (seconds)."""
    for name, scale in (("stage_denoise_s", 1.0), ("step_ms_median", 1e-3)):
        v = row.metrics.get(name)
        if isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v):
            return float(v) * scale
    return None


def quality_db(row: Any) -> Optional[float]:
    v = row.metrics.get("psnr_db")
    return float(v) if isinstance(v, (int, float)) and not isinstance(v, bool) and not math.isnan(v) else None


def candidates(rows: Sequence[Any]) -> list[tuple[Any, float, float]]:
    """(row, seconds, PSNR dB) of every completed point that has both."""
    out = []
    for r in rows:
        s, q = speed_s(r), quality_db(r)
        if r.ok and s is not None and q is not None:
            out.append((r, s, q))
    return out


def optimal_ids(rows: Sequence[Any]) -> set[str]:
    """Ids of the Pareto-optimal points (fastest for their quality)."""
    pts = candidates(rows)
    best = set()
    for r, s, q in pts:
        dominated = any((s2 <= s and q2 >= q) and (s2 < s or q2 > q) for r2, s2, q2 in pts if r2 is not r)
        if not dominated:
            best.add(r.id)
    return best


def mark(rows: Sequence[Any]) -> None:
    """Set ``values["pareto"]`` (yes / no) on the compared points, when at least two are."""
    pts = candidates(rows)
    if len(pts) < 2:
        return
    best = optimal_ids(rows)
    for r, _, _ in pts:
        r.values[COLUMN] = "yes" if r.id in best else "no"
