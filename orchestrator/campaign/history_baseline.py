"""A campaign directory's runs held against their baselines in the history store
(:func:`compare_to_baseline`), with the threshold semantics of :mod:`.compare`; a regression names
what changed in the environment fingerprint since the last earlier run.
"""

from __future__ import annotations

import math
import os
import statistics
from dataclasses import dataclass
from typing import List

from sporch.orchestrator.campaign.compare import Change, fingerprint_change
from sporch.orchestrator.campaign.history_runs import read_runs
from sporch.orchestrator.campaign.history_store import Store
from sporch.orchestrator.campaign.history_trends import histories
from sporch.orchestrator.campaign.metrics import METRICS, is_worse
from sporch.orchestrator.errors import SporchError


@dataclass
class BaselineComparison:
    changes: List[Change]  # Change.old: the baseline
    compared: int  # points that have a baseline
    without: List[str]  # completed points with no earlier run in the store
    campaign: str


def compare_to_baseline(root: str | os.PathLike, store: Store, k: int, threshold: float) -> BaselineComparison:
    """Each completed point of ``root`` against the median of its last ``k`` earlier runs in
    the store (same campaign, earlier time, another result file), metric by metric as
    :func:`.compare.compare` does: worse by more than ``threshold``, or a metric the baseline
    has that this run lacks or holds as NaN or an infinity."""
    current = read_runs(root)
    if not current:
        raise SporchError(f"{root} has no completed point to compare with its baseline")
    name = current[0].campaign
    past = histories(store.runs(point_ids=sorted({r.point_id for r in current}), campaign=name))
    out = BaselineComparison([], 0, [], name)
    for run in sorted(current, key=lambda r: r.point_id):
        earlier = [p for p in past.get((name, run.point_id), []) if p.time < run.time and p.digest != run.digest]
        if not earlier:
            out.without.append(run.point_id)
            continue
        out.compared += 1
        for m in METRICS:
            if m.name == "ideal_ms_per_step":
                continue
            seen = [v for v in (p.value(m.name) for p in earlier) if v is not None][-k:]
            if not seen:
                continue
            base = statistics.median(seen)
            new = run.metrics.get(m.name)
            if new is None or not math.isfinite(new) or is_worse(m.name, new, base, threshold):
                # what changed in the fingerprint since the last earlier run that has one
                last = next((p for p in reversed(earlier) if p.fingerprint is not None), None)
                out.changes.append(Change(run.point_id, run.values, m.name, base, new,
                                          *fingerprint_change(last, run)))
    return out
