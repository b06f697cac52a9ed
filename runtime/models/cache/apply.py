"""Step caching on the one model path: every ``workload.cache.method`` on any family's diffusers
transformer, on diffusers' hooks, with the skip decision agreed over the ranks of a replica
(docs/performance.md, "Step caching").

``apply_step_cache(models, section, ctx, num_steps=, preset=, groups=)`` puts the cache on the
transformer (or on each expert of a two-expert model, Wan2.2 A14B's ``transformer`` and
``transformer_2``: each its own state, so the low-noise expert's first step is computed) and
returns :class:`StepCacheHooks`, whose ``records`` (cache context -> :class:`StepCacheRecord`,
the experts merged) a workload reads and whose ``reset()`` starts a new denoising run:

* ``fbcache``: diffusers' First Block Cache with its head hook's decision agreed
  (:mod:`.cache_first_block`);
* ``teacache``, ``magcache``, ``taylorseer``: the whole block stack skipped by diffusers' MagCache
  block hooks under sporch's head hook (:mod:`.cache_stack`), each with its rule
  (:mod:`.cache_rules`); TeaCache's probe (:mod:`.cache_probe`) and its rescale polynomial, and
  MagCache's ratios, are the family's, by preset (``Family.teacache_probe``,
  ``teacache_coefficients``, ``magcache_ratios``; the job's ``workload.cache.ratios`` first).

``groups``: the context's groups a decision is agreed over: the sequence and cfg groups, or the
sequence group alone where the cfg ranks compute different calls (a pipeline's "cond" and
"uncond" split over the cfg ranks, :mod:`.cfg_two_calls`: each cfg rank's cache then sees one
context). A decision every rank takes from the same numbers is the unsharded model's over all its
tokens and rows. On top of each method's rule, sporch's step policy (``cache.decision.StepPolicy``:
the first ``warmup_steps`` and the last step computed, at most ``max_consecutive`` skips in a
row) applies.

What a class needs: its blocks in diffusers' ``TransformerBlockRegistry`` (every supported
family's are; an FSDP2-sharded block class is registered here with its diffusers class's entry)
and, for TeaCache, a head block with what the family's probe reads. diffusers' cache contexts
(``CacheMixin``) are not needed: a pipeline that opens none (SD3's, PixArt's: one batched call per
step) runs in the default context. What is missing is refused in one line.
"""

from __future__ import annotations

import dataclasses
from typing import Sequence

import torch

from sporch.orchestrator.contract.sections import CacheSection
from sporch.orchestrator.models.families import Family, require_family
from sporch.runtime.parallel import ParallelContext

from sporch.runtime.models.cache.decision import REDUCED_OVER, StepPolicy
from sporch.runtime.models.cache.first_block import TEXT_HOOK, apply_first_block
from sporch.runtime.models.cache.probe import make_probe
from sporch.runtime.models.cache.record import StepCacheRecord, merged
from sporch.runtime.models.cache.rules import IDENTITY, MagCacheRule, TaylorSeerRule, TeaCacheRule
from sporch.runtime.models.cache.stack import BLOCK_HOOK, HEAD_HOOK, apply_stack_cache
from sporch.runtime.models.split_plans import diffusers_type

__all__ = ["GENERIC_CACHE_METHODS", "StepCacheHooks", "StepCacheRecord", "apply_step_cache", "cache_blocks",
           "registered", "remove_step_cache"]

#: ``workload.cache.method`` values the one model path runs
GENERIC_CACHE_METHODS = ("fbcache", "teacache", "taylorseer", "magcache")


class StepCacheHooks:
    """The step cache on a model's transformers (one, or a two-expert model's two)."""

    def __init__(self, method: str, models: Sequence[torch.nn.Module], heads: Sequence) -> None:
        self.method, self.models, self.heads = method, tuple(models), tuple(heads)

    @property
    def records(self) -> dict[str, StepCacheRecord]:
        """Cache context -> its record, the experts' merged in step order (contexts in the order
        first seen)."""
        names = dict.fromkeys(name for head in self.heads for name in head.records)
        return {name: merged([h.records[name] for h in self.heads if name in h.records]) for name in names}

    def reset(self) -> None:
        """A new denoising run: every stateful hook of every transformer back to its start."""
        from diffusers.hooks.hooks import HookRegistry

        for model in self.models:
            HookRegistry.check_if_exists_or_initialize(model).reset_stateful_hooks(recurse=True)


def cache_blocks(model: torch.nn.Module) -> list[torch.nn.Module]:
    """The blocks a step cache hooks, in call order: every block of the model's top-level block
    lists (diffusers' ``_ALL_TRANSFORMER_BLOCK_IDENTIFIERS``, as its cache hooks find them)."""
    from diffusers.hooks._common import _ALL_TRANSFORMER_BLOCK_IDENTIFIERS

    return [block for name, blocks in model.named_children()
            if name in _ALL_TRANSFORMER_BLOCK_IDENTIFIERS and isinstance(blocks, torch.nn.ModuleList)
            for block in blocks]


def registered(block: torch.nn.Module, owner: str):
    """diffusers' ``TransformerBlockMetadata`` of ``block``'s class (an FSDP2-derived block class is
    registered with its diffusers class's entry); a ValueError, one line, for a class not in it."""
    from diffusers.hooks._helpers import TransformerBlockRegistry
    from diffusers.utils.torch_utils import unwrap_module

    cls = unwrap_module(block).__class__
    base = diffusers_type(cls)
    try:
        meta = TransformerBlockRegistry.get(base)
    except ValueError:
        raise ValueError(f"{owner}'s blocks ({base.__name__}) are not in diffusers' TransformerBlockRegistry, which "
                         "step caching reads their outputs' layout from: no step cache for it") from None
    if base is not cls:
        try:
            return TransformerBlockRegistry.get(cls)
        except ValueError:
            TransformerBlockRegistry.register(cls, dataclasses.replace(meta, _cls=None, _cached_parameter_indices=None))
    return meta


def remove_step_cache(model: torch.nn.Module) -> None:
    """Take off ``model`` any step cache applied to it (a model reused for another run, or run
    uncached again)."""
    from diffusers.hooks.first_block_cache import _FBC_BLOCK_HOOK, _FBC_LEADER_BLOCK_HOOK
    from diffusers.hooks.hooks import HookRegistry

    for block in cache_blocks(model):
        registry = HookRegistry.check_if_exists_or_initialize(block)
        for name in (HEAD_HOOK, BLOCK_HOOK, _FBC_LEADER_BLOCK_HOOK, _FBC_BLOCK_HOOK, TEXT_HOOK):
            registry.remove_hook(name, recurse=False)
    HookRegistry.check_if_exists_or_initialize(model).invalidate_child_registries_cache()


def _rule(section: CacheSection, family: Family, preset: str | None, head: torch.nn.Module, num_steps: int):
    """The decision of a cache that skips the whole stack, with the family's calibration."""
    from diffusers.utils.torch_utils import unwrap_module

    key = (preset or "").lower()
    threshold = float(section.threshold or 0.0)
    if section.method == "teacache":
        block = unwrap_module(head)
        return TeaCacheRule(tuple(family.teacache_coefficients.get(key, IDENTITY)), threshold,
                            make_probe(family.teacache_probe, block, registered(block, family.name)))
    if section.method == "taylorseer":
        return TaylorSeerRule(int(section.interval or 0), int(section.order or 1), int(section.warmup_steps))
    ratios = section.ratios or family.magcache_ratios.get(key)
    if ratios is None and threshold > 0:  # the planner refuses this; a hand-edited plan gets one line
        raise ValueError(f"workload.cache.method=magcache with threshold {threshold} needs magnitude ratios, and none "
                         f"are published for {preset or 'this model'}: give workload.cache.ratios")
    if ratios is not None:
        from diffusers.hooks.mag_cache import nearest_interp

        ratios = [float(r) for r in nearest_interp(torch.tensor([float(r) for r in ratios]), num_steps)]
    return MagCacheRule(ratios, threshold, int(section.warmup_steps))


def _apply_one(model: torch.nn.Module, section: CacheSection, ctx: ParallelContext | None, num_steps: int,
               preset: str | None, groups: tuple[str, ...]):
    from diffusers.hooks.hooks import HookRegistry

    name = diffusers_type(type(model)).__name__
    family = require_family(name)
    if section.method not in family.step_cache:
        why = f": {family.step_cache_refusal}" if family.step_cache_refusal else ""
        raise ValueError(f"workload.cache.method={section.method} is not built for {name}{why}")
    blocks = cache_blocks(model)
    if len(blocks) < 2:
        raise ValueError(f"step caching needs at least two transformer blocks; {name} has {len(blocks)}")
    for block in blocks:
        registered(block, name)
    remove_step_cache(model)
    policy = StepPolicy(num_steps=num_steps, threshold=float(section.threshold or 0.0),
                        warmup_steps=int(section.warmup_steps), max_consecutive=int(section.max_consecutive))
    root = HookRegistry.check_if_exists_or_initialize(model)  # the pipelines set cache contexts from the root
    if section.method == "fbcache":
        head = apply_first_block(model, blocks, policy, ctx, groups)
    else:
        head = apply_stack_cache(blocks, _rule(section, family, preset, blocks[0], num_steps), policy, ctx, groups,
                                 num_steps)
    root.invalidate_child_registries_cache()  # cache contexts reach the new hooks
    return head


def apply_step_cache(models: torch.nn.Module | Sequence[torch.nn.Module], section: CacheSection | None,
                     ctx: ParallelContext | None, *, num_steps: int, preset: str | None = None,
                     groups: tuple[str, ...] = REDUCED_OVER) -> StepCacheHooks | None:
    """Apply ``workload.cache`` to the transformer ``models`` (one module, or a two-expert model's
    two, in the order the pipeline uses them); None for method none. ``num_steps``: the run's
    denoising steps (a pipeline's own ``num_inference_steps`` in its cache context wins);
    ``preset``: ``plan.model.preset`` (the family's calibration for it); ``groups``: the context's
    groups a decision is agreed over (module docstring). A ValueError, one line, for a method the
    family does not list or a class that cannot take it."""
    if section is None or section.method == "none":
        return None
    if section.method not in GENERIC_CACHE_METHODS:
        raise ValueError(f"workload.cache.method={section.method} is not built for the one model path; use one of "
                         f"{', '.join(GENERIC_CACHE_METHODS)}")
    models = (models,) if isinstance(models, torch.nn.Module) else tuple(models)
    heads = [_apply_one(m, section, ctx, num_steps, preset, tuple(groups)) for m in models]
    return StepCacheHooks(section.method, models, heads)
