"""result.json's ``step_cache`` (docs/contracts.md): the job's steps computed and skipped, and
each rank's skip pattern, from the ranks' ``metrics["step_cache"]`` records (runtime:
sporch.runtime.models.cache). Standard library only.

Every rank of a dp replica must skip the same steps (the runtime reduces the decision and
raises when they differ); ``ranks_agree`` re-checks it on the records. Replicas hold different
prompts and may skip differently: ``steps_computed`` / ``steps_skipped`` sum over replicas
(each replica counted once), in denoising steps (a rank's own record counts transformer calls, two
a step under CFG). ``changes``: rank 0's measured change of each step of its first
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


def _skipped_steps(record: Dict[str, Any]) -> Any:
    """A rank's skipped denoising steps: per prompt batch (generate: each batch's first cache
    context, every context of a replica deciding alike), or one list (an inference run)."""
    batches = record.get("batches")
    if isinstance(batches, list):
        return [b.get("skipped", []) for b in batches if isinstance(b, dict)]
    return record.get("skipped", [])


def _steps(record: Dict[str, Any], which: str) -> int:
    """Denoising steps ``which`` (computed or skipped) of one rank's record, over its batches: steps,
    not transformer calls (a step of two CFG calls counts once)."""
    batches = record.get("batches")
    if isinstance(batches, list):
        return sum(len(b.get(which, [])) for b in batches if isinstance(b, dict))
    if isinstance(record.get(which), list):
        return len(record[which])
    return int(record.get(f"steps_{which}", 0))


def summarise_step_cache(per_rank: Dict[int, Dict[str, Any]]) -> Optional[Dict[str, Any]]:
    """``per_rank``: rank -> that rank's metrics. None when no rank used a step cache."""
    recs = {r: m["step_cache"] for r, m in per_rank.items() if isinstance(m.get("step_cache"), dict)}
    if not recs:
        return None
    first = recs[min(recs)]
    replicas: Dict[int, List[int]] = {}
    for r, rec in sorted(recs.items()):
        replicas.setdefault(int(rec.get("dp_rank", 0)), []).append(r)
    skipped = {r: _skipped_steps(rec) for r, rec in recs.items()}
    agree = all(skipped[r] == skipped[ranks[0]] for ranks in replicas.values() for r in ranks)
    leaders = [recs[ranks[0]] for ranks in replicas.values()]
    return {
        "method": first.get("method"), "threshold": first.get("threshold"),
        "warmup_steps": first.get("warmup_steps"), "max_consecutive": first.get("max_consecutive"),
        "steps_computed": sum(_steps(x, "computed") for x in leaders),
        "steps_skipped": sum(_steps(x, "skipped") for x in leaders),
        "skipped_by_rank": {str(r): skipped[r] for r in sorted(recs)},
        "changes": first_changes(first),
        "ranks_agree": agree,
    }
