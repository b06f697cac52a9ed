"""What both step caches share: one relative-L1 metric for the whole sequence, the step
policy, and the per-step record.

The metric ``sum|now - before| / sum|before|`` is taken over this rank's *valid* tokens
(padding excluded) and every batch row it holds; the two sums are all-reduced (float64) over
the sequence group and then the CFG group, so every rank of a dp replica sees the same number
and takes the same branch (same collectives, no torn image). Unsharded, the same sums run over
the same tokens and rows (both halves of a batched CFG pass), so the decision is the same.
dp replicas hold different prompts and decide independently (no reduction over dp). A probe
that is the same on every rank (Wan's time projection) is not summed but checked equal over the
same groups, and its largest value taken, so the ranks still decide alike.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Callable

import torch
import torch.distributed as dist

from sporch.orchestrator.contract.sections import CacheSection
from sporch.runtime.parallel import ParallelContext

from .agreement import StepCacheDisagreement


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


def relative_l1(now: torch.Tensor, before: torch.Tensor, valid: torch.Tensor,
                ctx: ParallelContext | None, groups: tuple[str, ...] = REDUCED_OVER) -> float:
    """``sum|now - before| / sum|before|`` over the valid tokens ([B, N, D] tensors, ``valid``
    a [N] bool mask), reduced over ``groups`` (ctx=None: this process's tokens only)."""
    m = valid.to(now.device)[None, :, None]
    diff = ((now.double() - before.double()).abs() * m).sum()
    base = (before.double().abs() * m).sum()
    sums = reduced_sums(torch.stack([diff, base]), ctx, groups)
    return float(sums[0] / sums[1]) if float(sums[1]) > 0 else float("inf")


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


@dataclass
class StepCache:
    """The state one denoising run keeps across steps; subclasses decide (:meth:`_decide`).
    ``start_step(i)`` before each step's forward; one forward per step (CFG batched or split
    over the cfg group)."""

    policy: StepPolicy
    step: int = -1
    computed: list[int] = field(default_factory=list)
    skipped: list[int] = field(default_factory=list)
    metrics: list[float] = field(default_factory=list)
    run_of_skips: int = 0
    residual: torch.Tensor | None = None  # this rank's cached residual (its own shard)

    method = "none"

    def start_step(self, step: int) -> None:
        self.step = step

    def bind(self, valid: torch.Tensor, ctx: ParallelContext | None) -> "BoundStep":
        return BoundStep(self, valid, ctx)

    def note(self, skip: bool, metric: float) -> None:
        (self.skipped if skip else self.computed).append(self.step)
        self.metrics.append(metric)
        self.run_of_skips = self.run_of_skips + 1 if skip else 0

    def record(self) -> dict:
        """The steps computed and skipped, and each step's measured change (None: nothing to
        compare with yet), which is what a threshold is chosen from."""
        return {"method": self.method, "computed": list(self.computed), "skipped": list(self.skipped),
                "changes": [round(m, 6) if math.isfinite(m) else None for m in self.metrics]}

    def run(self, x, first, rest, probe, valid, ctx):  # pragma: no cover - abstract
        raise NotImplementedError


@dataclass
class BoundStep:
    """One forward's view of the cache: the valid-token mask and the groups to reduce over."""

    cache: StepCache
    valid: torch.Tensor
    ctx: ParallelContext | None

    def run(self, x: torch.Tensor, first: Callable[[torch.Tensor], torch.Tensor],
            rest: Callable[[torch.Tensor], torch.Tensor],
            probe: Callable[[torch.Tensor], torch.Tensor], *, probe_per_token: bool = True) -> torch.Tensor:
        """``x`` the image-token stream before the blocks; ``first`` runs the first block,
        ``rest`` the others (both on the image stream, the model keeps any other stream),
        ``probe`` gives what TeaCache compares across steps: [B, N, D] per token (Flux.1: the
        first block's modulated input), or, ``probe_per_token=False``, [B, 1, D] the same on
        every rank (Wan2.1: the time projection, which depends on the timestep alone; its change
        is checked equal over the groups, :func:`shared_change`). Returns the stream after all blocks."""
        return self.cache.run(x, first, rest, probe if probe_per_token else _Shared(probe), self.valid, self.ctx)


@dataclass
class _Shared:
    """A probe whose value is the same on every rank and has no token axis (TeaCache on Wan2.1)."""

    fn: Callable[[torch.Tensor], torch.Tensor]

    def __call__(self, x: torch.Tensor) -> torch.Tensor:
        return self.fn(x)


#: how far apart the ranks' values of a shared probe's change may be before it is an error
SHARED_SPREAD = 1e-4


def shared_change(metric: float, ctx: ParallelContext | None) -> float:
    """A shared probe's change as every rank of the replica takes it: the largest over the
    sequence and cfg groups, so the ranks decide alike even where their last bits differ. Values
    further apart than SHARED_SPREAD (relative) mean the probe was not the same on every rank:
    raised on every rank at that step (the same reduced numbers), instead of ranks taking
    different branches and hanging in the next collective."""
    if ctx is None:
        return metric
    both = torch.tensor([metric, -metric], dtype=torch.float64)
    for dim in ("sequence", "cfg"):
        if ctx.size(dim) > 1:
            with ctx.guard(), ctx.collective("step_cache", dim, kind="all_reduce"):
                dist.all_reduce(both, op=dist.ReduceOp.MAX, group=ctx.group(dim))
    high, low = float(both[0]), -float(both[1])
    if high - low > SHARED_SPREAD * max(abs(high), 1e-12):
        raise StepCacheDisagreement(f"step cache: the ranks' probe changes range from {low:.6g} to {high:.6g}, "
                                    "but the probe must be the same on every rank (a model bug)")
    return high


def probe_change(now: torch.Tensor, before: torch.Tensor, probe, valid: torch.Tensor,
                 ctx: ParallelContext | None) -> float:
    """The probe's relative change: over the valid tokens reduced over the groups, or, for a
    probe the same on every rank (:class:`_Shared`), over its whole value, checked alike on
    every rank (:func:`shared_change`)."""
    if isinstance(probe, _Shared):
        return shared_change(relative_l1(now, before, torch.ones(now.shape[1], dtype=torch.bool), None), ctx)
    return relative_l1(now, before, valid, ctx)


def shared_decision(skip: bool, ctx: ParallelContext | None) -> bool:
    """A decision every rank takes from the same numbers (a schedule, a table of ratios),
    checked alike over the sequence and CFG groups: ranks that disagree all raise
    :class:`StepCacheDisagreement` at that step instead of taking different branches."""
    if ctx is None:
        return skip
    both = torch.tensor([float(skip), -float(skip)], dtype=torch.float64)
    for dim in ("sequence", "cfg"):
        if ctx.size(dim) > 1:
            with ctx.guard(), ctx.collective("step_cache", dim, kind="all_reduce"):
                dist.all_reduce(both, op=dist.ReduceOp.MAX, group=ctx.group(dim))
    if float(both[0]) != -float(both[1]):
        raise StepCacheDisagreement("step cache: some ranks of the replica would skip this step and others compute "
                                    "it (a schedule that differs between ranks: a model bug)")
    return skip
