"""What a step cache on the one model path records: per cache context, each step's branch and
measured change (:class:`StepCacheRecord`), and the ``step_cache`` a generate or inference
workload's metrics carry (:func:`step_cache_result`).

A step is one forward of the transformer within one cache context (diffusers' pipelines call it
in ``cache_context("cond")`` / ``("uncond")``, or ``("cond_uncond")`` for a batched CFG call; a
pipeline that opens none runs in diffusers' default context, ``inference``). Its index is the
pipeline's own (``CacheContext.step_index``, which WanPipeline passes) or else the count of that
context's forwards. A two-expert model (Wan2.2 A14B) records per expert; :func:`merged` joins the
experts' records of one context in step order (the experts run in turn).

The metrics' ``step_cache`` has the shape docs/contracts.md gives: the plan's knobs
and every rank's skipped steps checked equal (``cache.agreement.agreed_fields``), ``batches`` one
per denoised prompt, each with its first context's ``computed``, ``skipped`` and ``changes`` (the
pipeline's "cond" call, or its only one: a MagCache run without ratios measures them there, to be
given back as ``workload.cache.ratios``) and ``contexts``, every context's record.
``steps_computed`` / ``steps_skipped`` count transformer calls over every context.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Iterable, Sequence

from sporch.runtime.parallel import ParallelContext

from sporch.runtime.models.cache.agreement import agreed_fields

__all__ = ["DEFAULT_CONTEXT", "StepCacheRecord", "merged", "batch_record", "step_cache_result"]

#: the context diffusers' MagCache hooks use for a call outside any ``cache_context`` (SD3's and
#: PixArt's pipelines open none: one batched call per step)
DEFAULT_CONTEXT = "inference"


@dataclass
class StepCacheRecord:
    """One cache context's steps on one transformer: each step's index, branch and measured change
    (``inf``: nothing to compare with yet; a skipped step of MagCache or TaylorSeer measures
    nothing)."""

    method: str
    calls: int = 0  # forwards seen in this context (the step index where the pipeline gives none)
    run_of_skips: int = 0
    steps: list[int] = field(default_factory=list)
    skips: list[bool] = field(default_factory=list)
    changes: list[float] = field(default_factory=list)

    def note(self, step: int, skip: bool, change: float) -> None:
        self.steps.append(step)
        self.skips.append(skip)
        self.changes.append(change)
        self.run_of_skips = self.run_of_skips + 1 if skip else 0
        self.calls += 1

    def set_change(self, change: float) -> None:
        """The last step's change, measured after its blocks ran (MagCache's ratio, TaylorSeer's
        prediction error)."""
        self.changes[-1] = change

    @property
    def computed(self) -> list[int]:
        return [s for s, k in zip(self.steps, self.skips) if not k]

    @property
    def skipped(self) -> list[int]:
        return [s for s, k in zip(self.steps, self.skips) if k]

    def record(self) -> dict[str, Any]:
        return {"method": self.method, "computed": self.computed, "skipped": self.skipped,
                "changes": [round(c, 6) if math.isfinite(c) else None for c in self.changes],
                "steps_computed": len(self.computed), "steps_skipped": len(self.skipped)}


def merged(records: Sequence[StepCacheRecord]) -> StepCacheRecord:
    """One context's records of several transformers (the experts, which run in turn) as one, in
    step order; the one record itself when there is one."""
    if len(records) == 1:
        return records[0]
    rows = sorted((s, k, c) for r in records for s, k, c in zip(r.steps, r.skips, r.changes))
    out = StepCacheRecord(records[0].method, calls=sum(r.calls for r in records))
    for s, k, c in rows:
        out.steps.append(s)
        out.skips.append(k)
        out.changes.append(c)
    return out


def batch_record(batch: int, contexts: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """One denoised prompt's entry of ``step_cache.batches`` from its contexts' records
    (:meth:`StepCacheRecord.record`, in the order the pipeline opened them)."""
    first = next(iter(contexts.values()), {"computed": [], "skipped": [], "changes": []})
    return {"batch": batch, "computed": first["computed"], "skipped": first["skipped"], "changes": first["changes"],
            "contexts": contexts,
            "steps_computed": sum(len(r["computed"]) for r in contexts.values()),
            "steps_skipped": sum(len(r["skipped"]) for r in contexts.values())}


def step_cache_result(section: Any, batches: Iterable[dict[str, Any]], ctx: ParallelContext | None) -> dict[str, Any]:
    """A rank's ``metrics["step_cache"]`` from its batches (:func:`batch_record`): every rank of the
    replica's skipped steps per batch and context checked equal first (a difference raises
    ``StepCacheDisagreement`` on every rank)."""
    batches = list(batches)
    skipped = [{name: r["skipped"] for name, r in b["contexts"].items()} for b in batches]
    return {**agreed_fields(section, skipped, ctx), "batches": batches, "skipped": skipped,
            "steps_computed": sum(b["steps_computed"] for b in batches),
            "steps_skipped": sum(b["steps_skipped"] for b in batches)}


def inference_step_cache(section: Any, contexts: dict[str, dict[str, Any]], ctx: ParallelContext | None) -> dict[str, Any]:
    """A rank's ``metrics["step_cache"]`` of the inference workload (one denoising loop): the
    agreed fields with its first context's steps (every context of a replica decides alike), the
    counts over every context, and each context's record."""
    first = next(iter(contexts.values()), {"computed": [], "skipped": [], "changes": []})
    return {**agreed_fields(section, first["skipped"], ctx), "computed": first["computed"],
            "skipped": first["skipped"], "changes": first.get("changes", []), "contexts": contexts,
            "steps_computed": sum(len(r["computed"]) for r in contexts.values()),
            "steps_skipped": sum(len(r["skipped"]) for r in contexts.values())}
