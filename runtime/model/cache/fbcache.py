"""First-block cache (as ParaAttention describes it): every step runs the first block; when
its output residual changed little (relative L1 vs the residual of the last *computed* step,
below the threshold) the remaining blocks are skipped and their cached residual added."""

from __future__ import annotations

from dataclasses import dataclass

import torch

from .decision import StepCache, relative_l1


@dataclass
class FirstBlockCache(StepCache):
    first_residual: torch.Tensor | None = None

    method = "fbcache"

    def run(self, x, first, rest, probe, valid, ctx):
        h = first(x)
        r1 = h - x
        metric = float("inf")
        if self.first_residual is not None and self.residual is not None:
            metric = relative_l1(r1, self.first_residual, valid, ctx)
        skip = (metric < self.policy.threshold and self.policy.may_skip(self.step, self.run_of_skips))
        self.note(skip, metric)
        if skip:
            return h + self.residual
        self.first_residual = r1
        out = rest(h)
        self.residual = out - h
        return out
