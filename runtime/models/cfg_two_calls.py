"""CFG parallelism on the one model path for a pipeline that calls the transformer twice per step
(true CFG: ``QwenImagePipeline`` calls it on the prompt inside ``transformer.cache_context("cond")``,
then on the negative prompt inside ``cache_context("uncond")``), the pipeline's code unchanged.

:class:`CfgTwoCalls` (``with CfgTwoCalls(model, ctx):``) puts a diffusers ``ModelHook`` on the
transformer (``new_forward``, as :class:`~sporch.runtime.pipelines.resume.SkipTransformer`
does). The hook is stateful, so diffusers hands it each call's cache context (its ``StateManager``,
set by the pipeline's ``cache_context``), and that name says which pass a call is:

* the ``"cond"`` call: cfg rank 0 computes it (on its sequence group, where
  :class:`~.sequence_parallel.SequenceParallel` is attached) and returns the prediction; cfg rank 1
  computes nothing and returns a placeholder of the call's ``hidden_states`` shape (NaN: a
  placeholder never filled poisons the frames instead of passing unnoticed);
* the ``"uncond"`` call: cfg rank 1 computes it, cfg rank 0 returns nothing yet; then the two
  computed predictions are all-gathered over the cfg group, cfg rank 1 writes the ``"cond"`` one
  into the placeholder it returned before (in place: the pipeline holds that tensor) and cfg rank 0
  returns the ``"uncond"`` one. When the pipeline combines them every rank holds both, the same,
  and every rank's scheduler steps identically.

A pipeline that opens no cache context (``Lumina2Pipeline``: the prompt's call, then the negative
prompt's, every step) is told apart by the calls' order instead: the first of a pair is ``"cond"``,
the second ``"uncond"``.

Each rank runs one transformer pass per step instead of two. This is exact only where the
pipeline reads neither prediction between its two calls (cfg rank 1's ``"cond"`` prediction exists
only once the ``"uncond"`` call has returned) and the second call's inputs do not depend on the
first's output: ``Family.pipeline_cfg`` ``two_calls`` records that, and
tests/runtime/pipelines/test_generate_generic.py checks it on the pipeline's ``__call__`` source,
so a diffusers release that changes the order fails there. Calls that do not come as ``"cond"``
then ``"uncond"`` (another context, none, a pass missing) raise ValueError, on every rank alike
(each sees the same calls), before any collective.

The step cache (diffusers' First Block Cache, :mod:`.cache`) keeps one state per cache context, so
each cfg rank's cache holds only the context it computes; its skip decision is then agreed over
the sequence group alone (``apply_step_cache(groups=("sequence",))``), which is diffusers'
decision for that context on the whole sequence, and :func:`share_over_cfg` gives every rank both
contexts' records.
"""

from __future__ import annotations

from typing import Any, Callable

import torch
import torch.distributed as dist

from sporch.runtime.parallel import ParallelContext

__all__ = ["CfgTwoCalls", "HOOK_NAME", "share_over_cfg"]

#: The name the hook has in the transformer's diffusers hook registry.
HOOK_NAME = "sporch_cfg_two_calls"
#: cache context -> the cfg rank that computes that call
COMPUTED_BY = {"cond": 0, "uncond": 1}


def _prediction(output: Any) -> torch.Tensor:
    """The noise prediction of a transformer output (a tuple's first element, or ``.sample``)."""
    if isinstance(output, (tuple, list)):
        return output[0]
    return output.sample


def _as_output(prediction: torch.Tensor, return_dict: bool) -> Any:
    """``prediction`` returned as the call asked (``return_dict``: diffusers' output record)."""
    if return_dict:
        from diffusers.models.modeling_outputs import Transformer2DModelOutput

        return Transformer2DModelOutput(sample=prediction)
    return (prediction,)


class CfgTwoCalls:
    """While entered, the transformer's ``"cond"`` calls run on cfg rank 0 and its ``"uncond"``
    calls on cfg rank 1, each pair's predictions exchanged at the end of the second call (module
    docstring)."""

    def __init__(self, model: torch.nn.Module, ctx: ParallelContext) -> None:
        if ctx.cfg != 2:
            raise ValueError(f"CfgTwoCalls runs the two CFG calls on a cfg group of 2; this context has cfg {ctx.cfg}")
        self.model, self.ctx = model, ctx
        self._cond: torch.Tensor | None = None  # this step's "cond" prediction (or placeholder) until "uncond"
        self._attached = False

    @property
    def pending(self) -> bool:
        """A ``"cond"`` call whose ``"uncond"`` partner has not come yet."""
        return self._cond is not None

    def __enter__(self) -> "CfgTwoCalls":
        from diffusers.hooks import HookRegistry, ModelHook
        from diffusers.hooks.hooks import BaseState, StateManager

        owner = self

        class _NoState(BaseState):
            def reset(self, *args, **kwargs) -> None:
                pass

        class _TwoCalls(ModelHook):
            _is_stateful = True  # diffusers sets the cache context only on stateful hooks' StateManagers

            def __init__(self) -> None:
                super().__init__()
                self.state_manager = StateManager(_NoState)

            def new_forward(self, module, *args, **kwargs):
                return owner._call(module, self.state_manager, self.fn_ref.original_forward, args, kwargs)

            def reset_state(self, module):
                return module

        HookRegistry.check_if_exists_or_initialize(self.model).register_hook(_TwoCalls(), HOOK_NAME)
        self._attached = True
        return self

    def __exit__(self, exc_type, exc, tb) -> None:
        if self._attached:
            from diffusers.hooks import HookRegistry

            HookRegistry.check_if_exists_or_initialize(self.model).remove_hook(HOOK_NAME, recurse=False)
            self._attached = False
        if exc_type is None and self.pending:
            self._cond = None
            raise ValueError("CFG parallel over two calls: the pipeline's last \"cond\" transformer call had no "
                             "\"uncond\" call after it, so cfg rank 1's copy of its prediction was never filled; "
                             "plan with parallel.cfg=1")

    # -- one transformer call ----------------------------------------------------------------
    def _call(self, module, states, forward: Callable[..., Any], args, kwargs) -> Any:
        name = self._context_name(module, states)
        if args or "hidden_states" not in kwargs:
            raise ValueError(f"CFG parallel over two calls reads {type(module).__name__}'s arguments by name; it was "
                             "called without hidden_states by name")
        me, computes = self.ctx.cfg_rank, COMPUTED_BY[name]
        return_dict = bool(kwargs.get("return_dict", True))
        if name == "cond":
            if self.pending:
                raise ValueError("CFG parallel over two calls: two \"cond\" transformer calls without an \"uncond\" "
                                 "call between them (the pipeline skipped a step's negative pass); plan with "
                                 "parallel.cfg=1")
            if me == computes:
                out = forward(*args, **kwargs)
                self._cond = _prediction(out)
                return out
            self._cond = torch.full_like(kwargs["hidden_states"], float("nan"))
            return _as_output(self._cond, return_dict)
        if not self.pending:
            raise ValueError("CFG parallel over two calls: an \"uncond\" transformer call without a \"cond\" call "
                             "before it (the pipeline's order is not cond, uncond); plan with parallel.cfg=1")
        cond, self._cond = self._cond, None
        if me == computes:
            out = forward(*args, **kwargs)
            parts = self._exchange(_prediction(out), like=cond)
            cond.copy_(parts[0])
            return out
        parts = self._exchange(cond, like=kwargs["hidden_states"])
        return _as_output(parts[1], return_dict)

    def _context_name(self, module, states) -> str:
        """Which pass this call is: its cache context's name, or, for a pipeline that opens no cache
        context (``Lumina2Pipeline``), its place in the pair: the prompt's call first, the negative
        prompt's second."""
        try:
            name = states.context.name
        except ValueError:  # diffusers' StateManager outside a cache_context: the calls' order says
            return "uncond" if self.pending else "cond"
        if name not in COMPUTED_BY:
            raise ValueError(f"CFG parallel over two calls needs each {type(module).__name__} call inside the "
                             f"pipeline's cache_context(\"cond\") or (\"uncond\"), or in none; this call's context "
                             f"is {name!r}")
        return name

    def _exchange(self, mine: torch.Tensor, like: torch.Tensor) -> list[torch.Tensor]:
        """[cond, uncond]: this rank's computed prediction and the other cfg rank's, all-gathered
        in cfg-rank order. ``like``: the other call's placeholder or hidden states, whose shape and
        dtype the placeholders have; the prediction must have them too (checked on both ranks alike
        before the collective)."""
        if (mine.shape, mine.dtype) != (like.shape, like.dtype):
            raise ValueError(f"CFG parallel over two calls: the transformer's prediction {tuple(mine.shape)} "
                             f"{mine.dtype} is not shaped like its hidden_states {tuple(like.shape)} {like.dtype}, "
                             "as the other cfg rank's placeholder is; plan with parallel.cfg=1")
        mine = mine.contiguous()
        parts = [torch.empty_like(mine) for _ in range(2)]
        with self.ctx.guard(), self.ctx.collective("cfg_gather", "cfg", kind="all_gather"):
            dist.all_gather(parts, mine, group=self.ctx.cfg_group)
        stats = getattr(self.ctx, "comm_stats", None)
        if stats is not None:  # this rank's prediction goes to the other cfg rank
            stats.add("cfg_gather", mine.numel() * mine.element_size())
        return parts


def share_over_cfg(records: dict[str, Any], ctx: ParallelContext) -> dict[str, Any]:
    """``records`` (cache context -> this rank's record of it) merged with the other cfg rank's:
    with the two calls split each cfg rank computes, and records, one context."""
    gathered: list[Any] = [None] * ctx.cfg
    with ctx.guard(), ctx.collective("step_cache_records", "cfg", kind="all_gather_object"):
        dist.all_gather_object(gathered, records, group=ctx.cfg_group)
    merged: dict[str, Any] = {}
    for part in gathered:
        merged.update(part)
    return merged
