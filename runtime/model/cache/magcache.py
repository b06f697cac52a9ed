"""MagCache (github.com/Zehong-Ma/MagCache): the block stack's residual shrinks or grows from
step to step by a ratio of magnitudes that is nearly the same for every prompt of a model and
schedule; while the error those ratios accumulate, ``sum |1 - prod ratio|``, stays at or below
``threshold`` (and at most ``max_consecutive`` steps in a row, 0: no cap) the blocks are skipped
and the last computed residual added.

The ratios: the job's ``workload.cache.ratios``, or the published ones (Flux.1: diffusers
0.42.1's ``FLUX_MAG_RATIOS``), interpolated to the run's steps with diffusers' ``nearest_interp``
(diffusers/hooks/mag_cache.py; the accumulation is its ``MagCacheHeadHook``'s). Without ratios
(threshold 0) nothing is skipped and each step's ratio is measured: ``mean_tokens(|r_t| /
|r_{t-1}|)`` over the valid tokens, the sums reduced over the sequence and CFG groups (the
number an unsharded run measures); result.json's ``step_cache.changes`` holds them, the ratios to
give back as ``workload.cache.ratios``. The decision depends on the ratios and the step index,
so every rank takes it alike; it is checked over the groups each step (:func:`shared_decision`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Sequence

import torch

from .decision import StepCache, reduced_sums, shared_decision

#: presets with published magnitude ratios (diffusers' FLUX_MAG_RATIOS, from the MagCache repository)
FLUX_PRESETS = ("flux.1-dev", "flux.1-schnell")


def published_ratios(preset: str | None) -> list[float] | None:
    if (preset or "").lower() not in FLUX_PRESETS:
        return None
    from diffusers.hooks.mag_cache import FLUX_MAG_RATIOS

    return [float(r) for r in FLUX_MAG_RATIOS]


def step_ratios(ratios: Sequence[float], num_steps: int) -> list[float]:
    """``ratios`` resampled to ``num_steps`` (diffusers' nearest-neighbour interpolation)."""
    if len(ratios) == num_steps:
        return [float(r) for r in ratios]
    from diffusers.hooks.mag_cache import nearest_interp

    return [float(r) for r in nearest_interp(torch.tensor(list(ratios), dtype=torch.float32), num_steps)]


def magnitude_ratio(now: torch.Tensor, before: torch.Tensor, valid: torch.Tensor, ctx: Any) -> float:
    """Mean over the valid tokens (and batch rows) of ``|now| / |before|`` (token norms), the
    sum and count reduced over the sequence and CFG groups."""
    m = valid.to(now.device)[None, :].expand(now.shape[0], -1)
    r = torch.linalg.vector_norm(now.double(), dim=-1) / (torch.linalg.vector_norm(before.double(), dim=-1) + 1e-8)
    sums = reduced_sums(torch.stack([(r * m).sum(), m.sum().double()]), ctx)
    return float(sums[0] / sums[1]) if float(sums[1]) > 0 else float("nan")


@dataclass
class MagCache(StepCache):
    ratios: list[float] | None = None  # per step; None: measure only (no skipping)
    accumulated_ratio: float = 1.0
    accumulated_err: float = 0.0
    accumulated_steps: int = 0

    method = "magcache"

    def run(self, x, first, rest, probe, valid, ctx):
        skip = False
        if self.ratios is not None and self.step >= self.policy.warmup_steps:
            self.accumulated_ratio *= self.ratios[min(self.step, len(self.ratios) - 1)]
            self.accumulated_steps += 1
            self.accumulated_err += abs(1.0 - self.accumulated_ratio)
            skip = (self.residual is not None and self.accumulated_err <= self.policy.threshold
                    and self.policy.may_skip(self.step, self.run_of_skips))
            if not skip:
                self.accumulated_ratio, self.accumulated_err, self.accumulated_steps = 1.0, 0.0, 0
        skip = shared_decision(skip, ctx)
        if skip:
            self.note(True, float("inf"))
            return x + self.residual
        out = rest(first(x))
        residual = out - x
        metric = magnitude_ratio(residual, self.residual, valid, ctx) if self.residual is not None else 1.0
        self.residual = residual
        self.note(False, metric)
        return out
