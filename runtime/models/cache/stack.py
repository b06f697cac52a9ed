"""The hooks of the step caches that skip the whole block stack (TeaCache, MagCache, TaylorSeer),
on diffusers' hook registry and MagCache's block hooks.

diffusers' MagCache (``diffusers.hooks.mag_cache``) has the shape all three need: a hook on the
head block decides, for each forward, whether the blocks run (``state.should_compute``, one state
per cache context); ``MagCacheBlockHook`` on every other block returns its inputs unchanged on a
skipped forward and, on the tail block of a computed one, stores the stack's residual (tail output
minus head input: ``state.previous_residual``). Here:

* :class:`StackHeadHook` takes the head block's place with sporch's decision: the rule's
  (:mod:`.cache_rules`: TeaCache's probe and polynomial, MagCache's ratios, TaylorSeer's
  schedule) under sporch's step policy, reduced or checked over the replica's groups, each step
  recorded (:class:`.cache_record.StepCacheRecord`); on a skipped forward it returns the head's
  input plus the rule's residual (the last computed one, or TaylorSeer's prediction) in the
  block's output layout, the text stream passed through as it came (no family reads it after the
  blocks);
* the middle blocks keep diffusers' ``MagCacheBlockHook``; the tail's, :class:`StackTailHook`,
  hands each computed residual to the rule (MagCache measures its ratio, TaylorSeer updates its
  expansion) where diffusers' would calibrate, and leaves the step count to the head (the
  pipeline's step index), so nothing is printed or reset mid-run.

Under sequence parallelism the head's input and the tail's output are this rank's tokens (the
split plans split before the head block and gather after the tail), so each rank keeps the
residual of its own chunk and adds it back to the same chunk.

:func:`apply_stack_cache` puts the hooks on a model's blocks; the hook classes derive from
diffusers' and are made when a cache is applied (:func:`stack_hooks`), so diffusers is imported
only where a cache runs.
"""

from __future__ import annotations

from typing import Any, Sequence

import torch

from sporch.runtime.parallel import ParallelContext

from sporch.runtime.models.cache.decision import StepPolicy
from sporch.runtime.models.cache.first_block import context_of, step_of
from sporch.runtime.models.cache.record import StepCacheRecord

__all__ = ["stack_hooks", "apply_stack_cache", "HEAD_HOOK", "BLOCK_HOOK"]

#: the names the hooks have in a block's diffusers hook registry
HEAD_HOOK, BLOCK_HOOK = "sporch_step_cache_head", "sporch_step_cache_block"


def stack_hooks() -> tuple[type, type, type]:
    """``(StackState, StackHeadHook, StackTailHook)`` (module docstring)."""
    from diffusers.hooks._helpers import TransformerBlockRegistry
    from diffusers.hooks.hooks import ModelHook
    from diffusers.hooks.mag_cache import MagCacheBlockHook, MagCacheState
    from diffusers.utils.torch_utils import unwrap_module

    class StackState(MagCacheState):
        """diffusers' MagCache state of one cache context, with what TeaCache (the last probe,
        the accumulated change) and TaylorSeer (its expansion) keep across steps."""

        def __init__(self) -> None:
            super().__init__()
            self.probe: torch.Tensor | None = None
            self.accumulated = 0.0
            self.taylor: Any = None

        def reset(self) -> None:
            super().reset()
            self.probe, self.accumulated, self.taylor = None, 0.0, None

    class StackHeadHook(ModelHook):
        """The head block's hook: decides each forward. ``records``: cache context ->
        :class:`StepCacheRecord`."""

        _is_stateful = True

        def __init__(self, state_manager, rule: Any, policy: StepPolicy, ctx: ParallelContext | None,
                     groups: tuple[str, ...]) -> None:
            super().__init__()
            self.state_manager, self.rule, self.policy = state_manager, rule, policy
            self.ctx, self.groups = ctx, groups
            self.records: dict[str, StepCacheRecord] = {}
            self._metadata = None

        def initialize_hook(self, module):
            self._metadata = TransformerBlockRegistry.get(unwrap_module(module).__class__)
            return module

        def reset_state(self, module):
            self.records = {}
            self.state_manager.reset()
            return module

        def record(self) -> StepCacheRecord:
            return self.records[self.state_manager.context.name]

        @torch.compiler.disable
        def _decide(self, module, args, kwargs) -> bool:
            context = context_of(self.state_manager)
            state = self.state_manager.get_state()
            rec = self.records.setdefault(context.name, StepCacheRecord(self.rule.method))
            step, policy = step_of(context, rec, self.policy)
            meta = self._metadata
            state.head_block_input = meta._get_parameter_from_args_kwargs(meta.hidden_states_argument_name, args,
                                                                          kwargs)
            skip, change = self.rule.decide(state, step, policy.may_skip(step, rec.run_of_skips),
                                            (module, args, kwargs), self.ctx, self.groups)
            state.should_compute = not skip
            rec.note(step, skip, change)
            return skip

        def new_forward(self, module: torch.nn.Module, *args, **kwargs):
            if not self._decide(module, args, kwargs):
                return self.fn_ref.original_forward(*args, **kwargs)
            state = self.state_manager.get_state()
            hidden = state.head_block_input + self.rule.residual(state).to(state.head_block_input.dtype)
            meta = self._metadata
            if meta.return_encoder_hidden_states_index is None:
                return hidden
            out = [None] * (max(meta.return_hidden_states_index, meta.return_encoder_hidden_states_index) + 1)
            out[meta.return_hidden_states_index] = hidden
            out[meta.return_encoder_hidden_states_index] = meta._get_parameter_from_args_kwargs(
                meta.encoder_hidden_states_argument_name, args, kwargs)
            return tuple(out)

    class StackTailHook(MagCacheBlockHook):
        """diffusers' MagCache block hook on the tail block, handing each computed residual to the
        head's rule (recorded as that step's change where the rule measures one)."""

        def __init__(self, state_manager, config, head: StackHeadHook) -> None:
            super().__init__(state_manager, is_tail=True, config=config)
            self.head = head

        @torch.compiler.disable
        def _perform_calibration_step(self, state: StackState, current_residual: torch.Tensor) -> None:
            change = self.head.rule.after_compute(state, current_residual, self.head.ctx, self.head.groups)
            if change is not None:
                self.head.record().set_change(change)

        def _advance_step(self, state: StackState) -> None:
            """The head counts the steps (the pipeline's index): nothing to advance or reset here."""

    return StackState, StackHeadHook, StackTailHook


def apply_stack_cache(blocks: Sequence[torch.nn.Module], rule: Any, policy: StepPolicy, ctx: ParallelContext | None,
                      groups: tuple[str, ...], num_steps: int) -> Any:
    """The hooks on ``blocks`` (a model's blocks in call order, at least two), one state per cache
    context; returns the head hook (its ``records``)."""
    from diffusers.hooks.hooks import HookRegistry, StateManager
    from diffusers.hooks.mag_cache import MagCacheBlockHook, MagCacheConfig

    state_cls, head_cls, tail_cls = stack_hooks()
    manager = StateManager(state_cls, (), {})
    config = MagCacheConfig(calibrate=True, num_inference_steps=num_steps)  # the tail hands on every residual
    head = head_cls(manager, rule, policy, ctx, groups)
    for block in blocks[1:-1]:
        HookRegistry.check_if_exists_or_initialize(block).register_hook(
            MagCacheBlockHook(manager, is_tail=False, config=config), BLOCK_HOOK)
    HookRegistry.check_if_exists_or_initialize(blocks[-1]).register_hook(tail_cls(manager, config, head), BLOCK_HOOK)
    HookRegistry.check_if_exists_or_initialize(blocks[0]).register_hook(head, HEAD_HOOK)
    return head
