"""First Block Cache on the one model path: diffusers' own (``apply_first_block_cache``: every step
runs the first block; when its output residual changed little against the last computed step's,
the other blocks are skipped and their cached residual added) with its head-block hook replaced
by ``AgreedHeadHook``, a subclass of diffusers' ``FBCHeadBlockHook`` with its decision changed:

* the change ``sum|r - r_prev| / sum|r_prev|`` (diffusers' ratio of means over the same tensors)
  has its two sums reduced over the replica's groups (:func:`.cache_rules.relative_change`), so
  every rank takes the branch the unsharded model takes over all tokens and rows;
* sporch's step policy applies on top (the first ``warmup_steps`` and the last step computed, at
  most ``max_consecutive`` skips in a row), and each step's change and branch are recorded
  (:class:`.cache_record.StepCacheRecord`, one per cache context);
* a call outside any cache context (a pipeline that opens none: SD3's, PixArt's) runs in
  diffusers' default context (``inference``, :func:`context_of`) instead of failing;
* a tail block that returns no text stream (SD3's last ``JointTransformerBlock``,
  ``context_pre_only``: ``None``) returns its text input instead (``TextOutputFilled``, inside
  diffusers' tail hook, whose residual of the text stream would otherwise fail on ``None``); the
  model reads no text stream after its blocks.

The hook classes derive from diffusers' and are made by :func:`first_block_hooks` when a cache
is applied, so diffusers is imported only where a cache runs.
"""

from __future__ import annotations

import math
from typing import Any

import torch

from sporch.runtime.parallel import ParallelContext

from sporch.runtime.models.cache.decision import StepPolicy
from sporch.runtime.models.cache.record import DEFAULT_CONTEXT, StepCacheRecord
from sporch.runtime.models.cache.rules import relative_change

__all__ = ["first_block_hooks", "apply_first_block", "context_of", "step_of", "TEXT_HOOK"]

#: the name of the text-output hook in the tail block's diffusers hook registry
TEXT_HOOK = "sporch_step_cache_text"


def context_of(state_manager: Any) -> Any:
    """The state manager's cache context (diffusers' ``CacheContext``), diffusers' default one
    where the caller opened none."""
    if state_manager._context is None:
        from diffusers.hooks.hooks import CacheContext

        state_manager.set_context(CacheContext(name=DEFAULT_CONTEXT))
    return state_manager._context


def step_of(context: Any, record: StepCacheRecord, policy: StepPolicy) -> tuple[int, StepPolicy]:
    """This forward's step index (the pipeline's, else the context's count of forwards) and the
    policy for the run's length (the pipeline's ``num_inference_steps`` where it gives it)."""
    step = context.step_index if context.step_index is not None else record.calls
    total = context.num_inference_steps
    if total is not None and total != policy.num_steps:
        policy = StepPolicy(num_steps=int(total), threshold=policy.threshold, warmup_steps=policy.warmup_steps,
                            max_consecutive=policy.max_consecutive)
    return int(step), policy


def first_block_hooks() -> tuple[type, type]:
    """``(AgreedHeadHook, TextOutputFilled)`` (module docstring)."""
    from diffusers.hooks._helpers import TransformerBlockRegistry
    from diffusers.hooks.first_block_cache import FBCHeadBlockHook
    from diffusers.hooks.hooks import ModelHook
    from diffusers.utils.torch_utils import unwrap_module

    class AgreedHeadHook(FBCHeadBlockHook):
        """diffusers' First Block Cache head-block hook whose decision is reduced over the
        replica's ranks and follows sporch's step policy. ``records``: cache context ->
        :class:`StepCacheRecord`."""

        def __init__(self, state_manager, threshold: float, ctx: ParallelContext | None, policy: StepPolicy,
                     groups: tuple[str, ...]) -> None:
            super().__init__(state_manager, threshold)
            self.ctx, self.policy, self.groups = ctx, policy, groups
            self.records: dict[str, StepCacheRecord] = {}

        def reset_state(self, module):
            self.records = {}
            return super().reset_state(module)

        def new_forward(self, module: torch.nn.Module, *args, **kwargs):
            context_of(self.state_manager)
            return super().new_forward(module, *args, **kwargs)

        @torch.compiler.disable
        def _should_compute_remaining_blocks(self, hidden_states_residual: torch.Tensor) -> bool:
            state = self.state_manager.get_state()
            context = self.state_manager.context
            rec = self.records.setdefault(context.name, StepCacheRecord("fbcache"))
            step, policy = step_of(context, rec, self.policy)
            change = math.inf
            if state.head_block_residual is not None and state.tail_block_residuals is not None:
                change = relative_change(hidden_states_residual, state.head_block_residual, self.ctx, self.groups)
            skip = change <= self.threshold and policy.may_skip(step, rec.run_of_skips)
            rec.note(step, skip, change)
            return not skip

    class TextOutputFilled(ModelHook):
        """A block's ``None`` text output replaced by its text input."""

        def initialize_hook(self, module):
            self._metadata = TransformerBlockRegistry.get(unwrap_module(module).__class__)
            return module

        def new_forward(self, module: torch.nn.Module, *args, **kwargs):
            output = self.fn_ref.original_forward(*args, **kwargs)
            index = self._metadata.return_encoder_hidden_states_index
            if index is None or not isinstance(output, tuple) or output[index] is not None:
                return output
            filled = list(output)
            filled[index] = self._metadata._get_parameter_from_args_kwargs(
                self._metadata.encoder_hidden_states_argument_name, args, kwargs)
            return tuple(filled)

    return AgreedHeadHook, TextOutputFilled


def apply_first_block(model: torch.nn.Module, blocks: list[torch.nn.Module], policy: StepPolicy,
                      ctx: ParallelContext | None, groups: tuple[str, ...]) -> Any:
    """diffusers' First Block Cache on ``model`` with the agreed head hook (``blocks``: the model's
    blocks in call order, at least two); returns the head hook (its ``records``)."""
    from diffusers.hooks import FirstBlockCacheConfig, apply_first_block_cache
    from diffusers.hooks.first_block_cache import _FBC_LEADER_BLOCK_HOOK
    from diffusers.hooks.hooks import HookRegistry

    head_cls, text_cls = first_block_hooks()
    # inside diffusers' tail hook: a tail that returns no text stream (SD3's) returns its text input
    HookRegistry.check_if_exists_or_initialize(blocks[-1]).register_hook(text_cls(), TEXT_HOOK)
    apply_first_block_cache(model, FirstBlockCacheConfig(threshold=policy.threshold))
    registry = HookRegistry.check_if_exists_or_initialize(blocks[0])
    theirs = registry.get_hook(_FBC_LEADER_BLOCK_HOOK)
    registry.remove_hook(_FBC_LEADER_BLOCK_HOOK, recurse=False)
    head = head_cls(theirs.state_manager, policy.threshold, ctx, policy, groups)
    registry.register_hook(head, _FBC_LEADER_BLOCK_HOOK)
    return head
