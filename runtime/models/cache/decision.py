"""What every step cache shares: the sums its skip decision is taken from, reduced so that every
rank of a dp replica sees the same numbers, and the step policy.

A metric's sums are taken over this rank's valid tokens and every batch row it holds, in float64,
and all-reduced over the sequence group and then the CFG group (:func:`reduced_sums`), so every
rank of a dp replica takes the same branch (same collectives, no torn image). dp replicas hold
different prompts and decide independently (no reduction over dp).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.distributed as dist

from sporch.orchestrator.contract.sections import CacheSection
from sporch.runtime.parallel import ParallelContext

#: the groups a replica's step-cache sums are reduced over: the sequence's chunks and the CFG rows
REDUCED_OVER = ("sequence", "cfg")


def reduced_sums(parts: torch.Tensor, ctx: ParallelContext | None,
                 groups: tuple[str, ...] = REDUCED_OVER) -> torch.Tensor:
    """``parts`` (float64 sums on this rank) summed over ``groups`` (the sequence and CFG groups;
    the sequence group alone where the cfg ranks compute different calls)."""
    if ctx is None:
        return parts
    for dim in groups:
        if ctx.size(dim) > 1:
            with ctx.guard(), ctx.collective("step_cache", dim, kind="all_reduce"):
                dist.all_reduce(parts, group=ctx.group(dim))
    return parts


@dataclass
class StepPolicy:
    """When a step may be skipped at all: never in the first ``warmup_steps``, never the last
    step, never more than ``max_consecutive`` in a row (0: no cap)."""

    num_steps: int
    threshold: float
    warmup_steps: int = CacheSection.warmup_steps  # the Plan section's defaults, written once there
    max_consecutive: int = CacheSection.max_consecutive

    def may_skip(self, step: int, run_of_skips: int) -> bool:
        if step < self.warmup_steps or step >= self.num_steps - 1:
            return False
        return not (self.max_consecutive and run_of_skips >= self.max_consecutive)
