"""A point's history: its runs in one campaign (same campaign name, same point id), by time.

The baseline of a run is the median of the last ``k`` runs before it that have the metric
(:func:`rolling_baseline`); a run worse than its baseline by more than the threshold regressed
(:func:`trend`). A point's runs fall into groups of one environment fingerprint, and each run
names what changed from the run before it (``NCCL 2.21.5 -> 2.23.4``; :func:`fingerprint_changes`).
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass
from typing import Dict, Iterable, List, Optional, Sequence, Tuple

from sporch.orchestrator.campaign.history_runs import Run
from sporch.orchestrator.campaign.metrics import BY_NAME, is_worse
from sporch.orchestrator.contract.results import Fingerprint
from sporch.orchestrator.errors import SporchError

#: Runs a baseline is the median of, by default.
DEFAULT_K = 5
#: The metric a history shows when none is asked for: the first one a point's runs have.
MAIN_METRICS = ("step_ms_median", "stage_denoise_s_per_step", "stage_denoise_s", "tokens_per_s")


def histories(runs: Iterable[Run]) -> Dict[Tuple[str, str], List[Run]]:
    """(campaign, point id) -> its runs by time."""
    out: Dict[Tuple[str, str], List[Run]] = {}
    for r in runs:
        out.setdefault((r.campaign, r.point_id), []).append(r)
    for lst in out.values():
        lst.sort(key=lambda r: (r.time, r.digest))
    return out


def main_metric(runs: Sequence[Run]) -> str:
    """The metric a history shows by default: the first of :data:`MAIN_METRICS` the runs have."""
    for m in MAIN_METRICS:
        if any(r.value(m) is not None for r in runs):
            return m
    return MAIN_METRICS[0]


def rolling_baseline(values: Sequence[Optional[float]], k: int) -> List[Optional[float]]:
    """For each value, the median of the last ``k`` values before it that are numbers (None
    when there is none)."""
    out: List[Optional[float]] = []
    seen: List[float] = []
    for v in values:
        out.append(statistics.median(seen[-k:]) if seen else None)
        if v is not None:
            seen.append(v)
    return out


@dataclass(frozen=True)
class Entry:
    """One run of a point's trend: its value of the metric and its baseline."""

    run: Run
    value: Optional[float]
    baseline: Optional[float]
    regressed: bool

    @property
    def ratio(self) -> Optional[float]:
        return self.value / self.baseline if self.value is not None and self.baseline else None


def trend(runs: Sequence[Run], metric: str, k: int = DEFAULT_K, threshold: float = 0.05) -> List[Entry]:
    """``runs`` (one point's, by time) with the metric, its rolling baseline, and whether it is
    worse than the baseline by more than ``threshold``."""
    values = [r.value(metric) for r in runs]
    return [Entry(r, v, b, v is not None and b is not None and is_worse(metric, v, b, threshold))
            for r, v, b in zip(runs, values, rolling_baseline(values, k))]


def fingerprint_changes(runs: Sequence[Run]) -> List[Tuple[Optional[int], List[str]]]:
    """Per run (in order): its fingerprint group (runs of one fingerprint share a number, counted
    from 1 as new fingerprints appear; None without one) and what changed from the last earlier
    run that has a fingerprint (``["NCCL 2.21.5 -> 2.23.4"]``; empty: nothing, or no earlier one)."""
    groups: List[Fingerprint] = []
    previous: Optional[Fingerprint] = None
    out: List[Tuple[Optional[int], List[str]]] = []
    for r in runs:
        fp = r.fingerprint
        if fp is None:
            out.append((None, []))
            continue
        if fp not in groups:
            groups.append(fp)
        out.append((groups.index(fp) + 1, previous.differences(fp) if previous is not None else []))
        previous = fp
    return out


def check_metric(name: Optional[str]) -> Optional[str]:
    if name is not None and name not in BY_NAME:
        raise SporchError(f"--metric {name!r} is not a campaign metric; one of: {', '.join(BY_NAME)}")
    return name
