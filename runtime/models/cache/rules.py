"""The skip rules of the step caches that skip the whole block stack on the one model path
(TeaCache, MagCache, TaylorSeer; :mod:`.cache_stack` runs them in diffusers' block hooks), and the
reductions that make every rank of a replica take the same decision.

Under sequence parallelism each rank holds a chunk of the tokens (and with batched CFG split over
the cfg ranks, a half of the rows), so a change measured on a rank's own tensors would differ
between ranks, and ranks taking different branches hang in the next collective. Every measure
here is a ratio of sums whose two sums are all-reduced (float64) over the replica's ``groups``
(``cache.decision.reduced_sums``: the sequence and cfg groups; the sequence group alone where the
cfg ranks compute different calls), so every rank takes it from the same numbers, and they are the
numbers the unsharded model measures over all its tokens and rows. A tensor that is the same on
every rank (a timestep embedding) gives the same ratio summed over ranks as alone. A decision that
depends on the step index and fixed numbers only (MagCache's ratios, TaylorSeer's schedule) is
still checked alike over the groups (:func:`agreed`): ranks that differ all raise
``StepCacheDisagreement`` at that step instead of hanging.

* TeaCache (github.com/ali-vilab/TeaCache): a probe's relative change, mapped through the
  family's rescale polynomial for the preset (identity without one), accumulates; while the sum
  stays below ``threshold`` the stack is skipped and the last computed residual added.
* MagCache (github.com/Zehong-Ma/MagCache, diffusers' ``MagCacheHeadHook`` arithmetic): the
  accumulated error ``sum |1 - prod ratio|`` of the per-step magnitude ratios since the last
  computed step; at or below ``threshold`` the stack is skipped. Without ratios nothing is skipped
  and each computed step's ratio ``mean_tokens(|r_t| / |r_t-1|)`` is measured (reduced).
* TaylorSeer (arXiv 2503.06923): the stack computes on diffusers' schedule (the first
  ``warmup_steps``, then every ``interval``-th step); in between its residual is predicted by
  diffusers' ``TaylorSeerState`` (float32 factors) from the computed steps; each computed step after
  the first records the prediction's relative error there.

Each rule keeps its per-context numbers on the context's state (:class:`.cache_stack` makes one
per cache context) and sporch's step policy (``allowed``: not in the warm-up, not the last step,
under ``max_consecutive``) applies on top of it.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Callable, Sequence

import torch

from sporch.runtime.parallel import ParallelContext

from sporch.runtime.models.cache.agreement import StepCacheDisagreement
from sporch.runtime.models.cache.decision import reduced_sums

__all__ = ["relative_change", "agreed", "magnitude_ratio", "polyval", "TeaCacheRule", "MagCacheRule",
           "TaylorSeerRule", "IDENTITY"]

#: a rescale polynomial that leaves the change as it is (a preset without published coefficients)
IDENTITY = (1.0, 0.0)


def relative_change(now: torch.Tensor, before: torch.Tensor, ctx: ParallelContext | None,
                    groups: tuple[str, ...]) -> float:
    """``sum|now - before| / sum|before|`` over every element, the sums reduced over ``groups``
    (``inf`` where ``before`` is all zeros)."""
    sums = reduced_sums(torch.stack([(now.double() - before.double()).abs().sum(), before.double().abs().sum()]),
                        ctx, groups)
    return float(sums[0] / sums[1]) if float(sums[1]) > 0 else math.inf


def magnitude_ratio(now: torch.Tensor, before: torch.Tensor, ctx: ParallelContext | None,
                    groups: tuple[str, ...]) -> float:
    """MagCache's measured ratio: the mean over tokens (and rows) of ``|now| / |before|`` (each
    token's norm over the last dim, diffusers' calibration formula), its sum and count reduced."""
    r = torch.linalg.vector_norm(now.double(), dim=-1) / (torch.linalg.vector_norm(before.double(), dim=-1) + 1e-8)
    sums = reduced_sums(torch.stack([r.sum(), torch.tensor(float(r.numel()), dtype=torch.float64)]), ctx, groups)
    return float(sums[0] / sums[1]) if float(sums[1]) > 0 else math.nan


def agreed(skip: bool, ctx: ParallelContext | None, groups: tuple[str, ...]) -> bool:
    """``skip``, checked to be every rank's of ``groups``: ranks that differ all raise."""
    counts = reduced_sums(torch.tensor([float(skip), 1.0], dtype=torch.float64), ctx, groups)
    if float(counts[0]) not in (0.0, float(counts[1])):
        raise StepCacheDisagreement(f"step cache: {int(counts[0])} of {int(counts[1])} ranks of the replica would skip "
                                    "this step and the others compute it (a schedule that differs between ranks)")
    return skip


def polyval(coeffs: Sequence[float], x: float) -> float:
    """The polynomial ``coeffs`` (highest degree first) at ``x``."""
    y = 0.0
    for c in coeffs:
        y = y * x + c
    return y


@dataclass
class TeaCacheRule:
    coefficients: Sequence[float]
    threshold: float
    probe: Callable[..., torch.Tensor]  # (block, args, kwargs) -> the tensor compared across steps

    method = "teacache"

    def decide(self, state: Any, step: int, allowed: bool, call: tuple, ctx, groups) -> tuple[bool, float]:
        m = self.probe(*call)
        change = math.inf
        if state.probe is not None and state.previous_residual is not None:
            change = relative_change(m, state.probe, ctx, groups)
        state.probe = m
        skip = False
        if math.isfinite(change) and allowed:
            state.accumulated += polyval(self.coefficients, change)
            skip = state.accumulated < self.threshold
        if not skip:
            state.accumulated = 0.0
        return skip, change

    def residual(self, state: Any) -> torch.Tensor:
        return state.previous_residual

    def after_compute(self, state: Any, residual: torch.Tensor, ctx, groups) -> float | None:
        return None


@dataclass
class MagCacheRule:
    ratios: Sequence[float] | None  # per step of the run; None: measure only
    threshold: float
    warmup_steps: int

    method = "magcache"

    def decide(self, state: Any, step: int, allowed: bool, call: tuple, ctx, groups) -> tuple[bool, float]:
        skip = False
        if self.ratios is not None and step >= self.warmup_steps:
            state.accumulated_ratio *= float(self.ratios[min(step, len(self.ratios) - 1)])
            state.accumulated_steps += 1
            state.accumulated_err += abs(1.0 - state.accumulated_ratio)
            skip = state.previous_residual is not None and state.accumulated_err <= self.threshold and allowed
            if not skip:
                state.accumulated_ratio, state.accumulated_err, state.accumulated_steps = 1.0, 0.0, 0
        return agreed(skip, ctx, groups), math.inf

    def residual(self, state: Any) -> torch.Tensor:
        return state.previous_residual

    def after_compute(self, state: Any, residual: torch.Tensor, ctx, groups) -> float | None:
        """This step's measured ratio (1.0 at the first computed step, as diffusers logs it)."""
        if state.previous_residual is None:
            return 1.0
        return magnitude_ratio(residual, state.previous_residual, ctx, groups)


@dataclass
class TaylorSeerRule:
    interval: int
    order: int
    warmup_steps: int

    method = "taylorseer"

    def scheduled(self, step: int) -> bool:
        """diffusers' TaylorSeer schedule (``TaylorSeerCacheHook``): the warm-up, then every
        ``interval``-th step."""
        return step < self.warmup_steps or (step - self.warmup_steps - 1) % self.interval == 0

    def decide(self, state: Any, step: int, allowed: bool, call: tuple, ctx, groups) -> tuple[bool, float]:
        if state.taylor is None:
            from diffusers.hooks.taylorseer_cache import TaylorSeerState

            state.taylor = TaylorSeerState(taylor_factors_dtype=torch.float32, max_order=self.order)
        state.taylor.current_step = step
        skip = state.taylor.last_update_step is not None and not self.scheduled(step) and allowed
        return agreed(skip, ctx, groups), math.inf

    def residual(self, state: Any) -> torch.Tensor:
        return state.taylor.predict()[0]

    def after_compute(self, state: Any, residual: torch.Tensor, ctx, groups) -> float | None:
        """The prediction's relative error at this computed step (none at the first), then the
        expansion updated with the step's residual."""
        change = math.inf
        if state.taylor.last_update_step is not None:
            change = relative_change(state.taylor.predict()[0], residual, ctx, groups)
        state.taylor.update((residual,))
        return change
