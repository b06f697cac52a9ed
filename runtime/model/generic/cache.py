"""Step caching on the generic path: diffusers' First Block Cache with the skip decision agreed
over the ranks of a replica.

``apply_step_cache(model, section, ctx, num_steps=)`` applies diffusers' own First Block Cache
(``diffusers.hooks.apply_first_block_cache``: every step runs the first block; when its output
residual changed little against the last computed step's, the other blocks are skipped and
their cached residual added) and then puts :class:`AgreedHeadHook` in place of its head-block
hook, a subclass of diffusers' ``FBCHeadBlockHook`` (built on first use, so diffusers is imported
only where a cache runs) with one method changed: the decision.

Under sequence parallelism each rank holds a chunk of the residual, so diffusers' decision
(``mean|r - r_prev| / mean|r_prev| > threshold``, i.e. a ratio of sums) taken per rank would
differ between ranks, and ranks that take different branches hang in the next collective. Here
the two sums are all-reduced over the sequence and CFG groups (the hand-built path's
``cache.decision.relative_l1``, float64), so every rank of a replica takes the same branch, and
it is the decision the unsharded model takes over all tokens and rows. Where the cfg ranks
compute different calls (``groups=("sequence",)``: a pipeline's "cond" and "uncond" calls split
over the cfg ranks, :mod:`.cfg_two_calls`) each cfg rank's cache sees one context only, and the
sums are reduced over its sequence group: diffusers' decision for that context. On top of diffusers'
rule, sporch's step policy (``cache.decision.StepPolicy``: the first ``warmup_steps`` and the
last step computed, at most ``max_consecutive`` skips in a row) applies, as on the hand-built
path; each step's change and branch are recorded (:meth:`StepCacheRecord.record`, result.json's
``step_cache``).

A step is one forward of the model within one cache context (diffusers' pipelines call the
transformer in ``model.cache_context("cond")`` / ``("uncond")``; each context keeps its own
state and its own step count).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

import torch

from sporch.orchestrator.contract.sections import CacheSection
from sporch.runtime.parallel import ParallelContext

from ..cache.decision import REDUCED_OVER, StepPolicy, relative_l1

__all__ = ["GENERIC_CACHE_METHODS", "StepCacheRecord", "apply_step_cache"]

#: ``workload.cache.method`` values the generic path runs.
GENERIC_CACHE_METHODS = ("fbcache",)


@dataclass
class StepCacheRecord:
    """One cache context's steps: computed, skipped, each step's measured change."""

    step: int = 0
    run_of_skips: int = 0
    computed: list[int] = field(default_factory=list)
    skipped: list[int] = field(default_factory=list)
    changes: list[float] = field(default_factory=list)

    def note(self, skip: bool, change: float) -> None:
        (self.skipped if skip else self.computed).append(self.step)
        self.changes.append(change)
        self.run_of_skips = self.run_of_skips + 1 if skip else 0
        self.step += 1

    def record(self) -> dict[str, Any]:
        return {"method": "fbcache", "computed": list(self.computed), "skipped": list(self.skipped),
                "changes": [round(c, 6) if math.isfinite(c) else None for c in self.changes],
                "steps_computed": len(self.computed), "steps_skipped": len(self.skipped)}


def _head_hook_class():
    from diffusers.hooks.first_block_cache import FBCHeadBlockHook

    class AgreedHeadHook(FBCHeadBlockHook):
        """diffusers' head-block hook whose decision is reduced over the replica's ranks and
        follows sporch's step policy (module docstring)."""

        def __init__(self, state_manager, threshold: float, ctx: ParallelContext | None, policy: StepPolicy,
                     groups: tuple[str, ...] = REDUCED_OVER) -> None:
            super().__init__(state_manager, threshold)
            self.ctx, self.policy, self.groups = ctx, policy, groups
            self.records: dict[str, StepCacheRecord] = {}

        def reset_state(self, module):
            self.records = {}
            return super().reset_state(module)

        @torch.compiler.disable
        def _should_compute_remaining_blocks(self, hidden_states_residual: torch.Tensor) -> bool:
            state = self.state_manager.get_state()
            rec = self.records.setdefault(self.state_manager.context.name, StepCacheRecord())
            change = math.inf
            if state.head_block_residual is not None and state.tail_block_residuals is not None:
                r = hidden_states_residual
                valid = torch.ones(r.shape[1], dtype=torch.bool)  # the generic split pads nothing
                change = relative_l1(r, state.head_block_residual, valid, self.ctx, self.groups)
            skip = change <= self.threshold and self.policy.may_skip(rec.step, rec.run_of_skips)
            rec.note(skip, change)
            return not skip

    return AgreedHeadHook


def apply_step_cache(model: torch.nn.Module, section: CacheSection | None, ctx: ParallelContext | None, *,
                     num_steps: int, groups: tuple[str, ...] = REDUCED_OVER):
    """Apply ``workload.cache`` (method fbcache) to ``model``; returns the head-block hook (its
    ``records``: one :class:`StepCacheRecord` per cache context), or None for method none.
    ``groups``: the context's groups the skip decision is agreed over (module docstring)."""
    if section is None or section.method == "none":
        return None
    if section.method not in GENERIC_CACHE_METHODS:
        raise ValueError(f"workload.cache.method={section.method} is not built for the generic path; use "
                         f"{' or '.join(GENERIC_CACHE_METHODS)}")
    if not hasattr(model, "cache_context"):
        raise ValueError(f"{type(model).__name__} has no diffusers cache contexts (CacheMixin): no step cache for it")
    from diffusers.hooks import FirstBlockCacheConfig, HookRegistry, apply_first_block_cache
    from diffusers.hooks._common import _ALL_TRANSFORMER_BLOCK_IDENTIFIERS
    from diffusers.hooks.first_block_cache import _FBC_LEADER_BLOCK_HOOK

    threshold = float(section.threshold or 0.0)
    apply_first_block_cache(model, FirstBlockCacheConfig(threshold=threshold))
    head = next(blocks[0] for name, blocks in model.named_children()
                if name in _ALL_TRANSFORMER_BLOCK_IDENTIFIERS and isinstance(blocks, torch.nn.ModuleList))
    registry = HookRegistry.check_if_exists_or_initialize(head)
    theirs = registry.get_hook(_FBC_LEADER_BLOCK_HOOK)
    registry.remove_hook(_FBC_LEADER_BLOCK_HOOK)
    policy = StepPolicy(num_steps=num_steps, threshold=threshold, warmup_steps=int(section.warmup_steps),
                        max_consecutive=int(section.max_consecutive))
    ours = _head_hook_class()(theirs.state_manager, threshold, ctx, policy, groups)
    registry.register_hook(ours, _FBC_LEADER_BLOCK_HOOK)
    return ours
