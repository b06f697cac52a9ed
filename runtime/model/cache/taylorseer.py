"""TaylorSeer (arXiv 2503.06923): on a fixed schedule the blocks run, and on the steps between
the block stack's residual (output - input, this rank's shard) is predicted from a Taylor
expansion of its values at the computed steps (finite differences up to ``order``).

The expansion is diffusers 0.42.1's ``TaylorSeerState`` (diffusers/hooks/taylorseer_cache.py),
used as it is on the residual of the whole stack (what diffusers' lite mode does to the output
projection); so is its schedule: the first ``warmup_steps`` are computed, then every
``interval``-th step (``(step - warmup - 1) % interval == 0``), and sporch's policy adds the last
step and ``max_consecutive``. The decision depends on the step index alone, so every rank takes
it alike; it is still checked over the sequence and CFG groups each step (:func:`shared_decision`).
Each computed step after the first records the prediction's relative L1 error there (reduced
over the groups), what an ``interval`` is chosen from.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import torch

from .decision import StepCache, relative_l1, shared_decision


def taylor_state(order: int) -> Any:
    """diffusers' TaylorSeer expansion state (float32 factors)."""
    try:
        from diffusers.hooks.taylorseer_cache import TaylorSeerState
    except ImportError as exc:  # the pipelines extra pins diffusers
        raise RuntimeError(f"workload.cache.method=taylorseer needs diffusers (pip install 'sporch[pipelines]'): "
                           f"{exc}") from None
    return TaylorSeerState(taylor_factors_dtype=torch.float32, max_order=order)


def scheduled(step: int, warmup: int, interval: int) -> bool:
    """diffusers' TaylorSeer schedule: whether ``step`` is a computed one."""
    return step < warmup or (step - warmup - 1) % interval == 0


@dataclass
class TaylorSeerCache(StepCache):
    interval: int = 5
    order: int = 1
    state: Any = field(default=None, repr=False)

    method = "taylorseer"

    def run(self, x, first, rest, probe, valid, ctx):
        if self.state is None:
            self.state = taylor_state(self.order)
        self.state.current_step = self.step
        skip = (self.state.last_update_step is not None
                and not scheduled(self.step, self.policy.warmup_steps, self.interval)
                and self.policy.may_skip(self.step, self.run_of_skips))
        skip = shared_decision(skip, ctx)
        metric = float("inf")
        if skip:
            self.note(True, metric)
            return x + self.state.predict()[0].to(x.dtype)
        out = rest(first(x))
        residual = out - x
        if self.state.last_update_step is not None:  # how far the prediction would have been off
            metric = relative_l1(self.state.predict()[0], residual, valid, ctx)
        self.state.update((residual,))
        self.note(False, metric)
        return out
