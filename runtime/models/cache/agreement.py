"""Every rank of a dp replica must have skipped the same steps: the per-rank records are
gathered over the replica's sequence and cfg groups (every rank gets all of them, so every
rank fails alike) and compared; a difference is an error, never a silently torn output."""

from __future__ import annotations

from typing import Any

import torch.distributed as dist

from sporch.runtime.parallel import ParallelContext


class StepCacheDisagreement(RuntimeError):
    """Ranks of one dp replica skipped different steps."""


def replica_records(record: dict[str, Any], ctx: ParallelContext | None) -> list[dict[str, Any]]:
    """This replica's ranks' records (``record`` holds its ``rank``), every rank getting all."""
    records = [record]
    if ctx is None:
        return records
    for dim in ("sequence", "cfg"):
        if ctx.size(dim) > 1:
            got: list[Any] = [None] * ctx.size(dim)
            with ctx.guard(), ctx.collective("step_cache_record", dim, kind="all_gather_object"):
                dist.all_gather_object(got, records, group=ctx.group(dim))
            records = [r for part in got for r in part]
    return records


def agreed_fields(section: Any, skipped: Any, ctx: ParallelContext | None) -> dict[str, Any]:
    """The fields of a rank's ``step_cache`` record that every workload shares: the plan's
    knobs, this dp replica and every one of its ranks' ``skipped`` steps, checked equal first
    (a difference raises :class:`StepCacheDisagreement`)."""
    rank = ctx.rank if ctx is not None else 0
    records = replica_records({"rank": rank, "skipped": skipped}, ctx)
    first = records[0]
    for r in records[1:]:
        if r["skipped"] != first["skipped"]:
            raise StepCacheDisagreement(f"step cache: rank {r['rank']} skipped steps {r['skipped']} but rank "
                                        f"{first['rank']} skipped {first['skipped']}: the ranks took different branches")
    return {"method": section.method, "threshold": section.threshold, "warmup_steps": section.warmup_steps,
            "max_consecutive": section.max_consecutive, "interval": getattr(section, "interval", 0),
            "order": getattr(section, "order", 1), "dp_rank": ctx.dp_rank if ctx is not None else 0,
            "ranks_skipped": {str(r["rank"]): r["skipped"] for r in records}, "ranks_agree": True}
