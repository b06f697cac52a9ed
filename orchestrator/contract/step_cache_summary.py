"""result.json's ``step_cache`` (docs/contracts.md): the job's steps computed and skipped, and
each rank's skip pattern, from the ranks' ``metrics["step_cache"]`` records (runtime:
sporch.runtime.models.cache). Standard library only.

Every rank of a dp replica must skip the same steps (the runtime reduces the decision and
raises when they differ); ``ranks_agree`` re-checks it on the records. Replicas hold different
prompts and may skip differently: ``steps_computed`` / ``steps_skipped`` sum over replicas
(each replica counted once). ``changes``: rank 0's measured change of each step of its first
denoised batch (its first cache context's on the one model path): a MagCache run with threshold 0
measures the ratios there, to be given back as ``workload.cache.ratios``."""

from __future__ import annotations

from typing import Any, Dict, List, Optional


def first_changes(record: Dict[str, Any]) -> Optional[List[Any]]:
    """A rank's record's measured changes: its first batch's (generate), or its own (an
    inference run's one denoising loop); None when it has none."""
    if isinstance(record.get("changes"), list):
        return record["changes"]
    batches = record.get("batches") or []
    return batches[0].get("changes") if batches and isinstance(batches[0], dict) else None


def summarise_step_cache(per_rank: Dict[int, Dict[str, Any]]) -> Optional[Dict[str, Any]]:
    """``per_rank``: rank -> that rank's metrics. None when no rank used a step cache."""
    recs = {r: m["step_cache"] for r, m in per_rank.items() if isinstance(m.get("step_cache"), dict)}
    if not recs:
        return None
    first = recs[min(recs)]
    replicas: Dict[int, List[int]] = {}
    for r, rec in sorted(recs.items()):
        replicas.setdefault(int(rec.get("dp_rank", 0)), []).append(r)
    agree = all(recs[r]["skipped"] == recs[ranks[0]]["skipped"] for ranks in replicas.values() for r in ranks)
    leaders = [recs[ranks[0]] for ranks in replicas.values()]
    return {
        "method": first.get("method"), "threshold": first.get("threshold"),
        "warmup_steps": first.get("warmup_steps"), "max_consecutive": first.get("max_consecutive"),
        "steps_computed": sum(int(x.get("steps_computed", 0)) for x in leaders),
        "steps_skipped": sum(int(x.get("steps_skipped", 0)) for x in leaders),
        "skipped_by_rank": {str(r): recs[r]["skipped"] for r in sorted(recs)},
        "changes": first_changes(first),
        "ranks_agree": agree,
    }
