"""A point's history as people and files see it: :func:`trend_doc` (plain data: ``history
--json``, the report's history section and its plot), times, short revisions and a point's
identifying values in one line.
"""

from __future__ import annotations

from datetime import datetime, timezone
from typing import Any, Dict, Optional, Sequence

from sporch.orchestrator.campaign.history_runs import Run
from sporch.orchestrator.campaign.history_trends import DEFAULT_K, fingerprint_changes, main_metric, trend
from sporch.orchestrator.campaign.metrics import BY_NAME


def when(t: float) -> str:
    """A run's time for people: UTC, to the second."""
    return datetime.fromtimestamp(t, timezone.utc).strftime("%Y-%m-%d %H:%M:%S")


def short_revision(rev: Optional[str]) -> str:
    """A git revision cut to 10 hex digits, ``-dirty`` kept."""
    if not rev:
        return ""
    dirty = rev.endswith("-dirty")
    return rev[:10] + ("-dirty" if dirty else "")


def trend_doc(runs: Sequence[Run], metric: Optional[str] = None, k: int = DEFAULT_K, threshold: float = 0.05,
              last: Optional[int] = None) -> Dict[str, Any]:
    """One point's trend as plain data (``history --json``, the report's history section and
    its plot): the point, the metric and, per run (the last ``last``), its provenance, value,
    baseline, ratio and whether it regressed."""
    metric = metric or main_metric(runs)
    entries = trend(runs, metric, k, threshold)
    if last:
        entries = entries[-last:]
    latest = runs[-1]
    changed = fingerprint_changes([e.run for e in trend(runs, metric, k, threshold)])
    if last:
        changed = changed[-last:]
    return {
        "id": latest.point_id, "campaign": latest.campaign, "values": latest.values, "metric": metric,
        "unit": BY_NAME[metric].unit, "better": BY_NAME[metric].better, "k": k, "threshold": threshold,
        "total_runs": len(runs),
        "runs": [{"time": e.run.time, "when": when(e.run.time), "campaign_dir": e.run.campaign_dir,
                  "cluster": e.run.cluster, "git_revision": e.run.git_revision,
                  "torch_version": e.run.torch_version, "sporch_version": e.run.sporch_version,
                  "job_id": e.run.job_id, "digest": e.run.digest, "value": e.value, "baseline": e.baseline,
                  "ratio": e.ratio, "regressed": e.regressed, "fingerprint_group": group,
                  "changed": what} for e, (group, what) in zip(entries, changed)],
    }


def describe(values: Dict[str, Any]) -> str:
    """A point's identifying values in one line: ``local 4 GPUs 1x1x2x2 tiny 9x64x64 float32 r0``."""
    v = values
    parts = [str(v.get("cluster") or ""), f"{v['gpus']} GPUs" if v.get("gpus") not in (None, "") else "",
             str(v.get("layout") or ""), str(v.get("preset") or ""), str(v.get("shape") or ""),
             str(v.get("dtype") or ""), f"r{v['repeat']}" if v.get("repeat") not in (None, "") else ""]
    return " ".join(p for p in parts if p)
