"""Run a diffusers transformer of a supported family sharded over a ParallelContext, and compare
it with the same model unsharded (the one model path's verify).

``ShardedTransformer(model, ctx, family=)``: ``forward(**kwargs)`` -> the model's output, whole on
every rank, computed sequence-parallel over ``ctx``'s sequence group (``SequenceParallel`` with
the class's split plan). ``verify_model`` -> max abs / relative error against the unsharded
forward of the same inputs.
"""

from __future__ import annotations

from typing import Any, Callable

import torch

from sporch.orchestrator.models.families import require_family
from sporch.runtime.parallel import ParallelContext

from sporch.runtime.models.finite import check_output
from sporch.runtime.models.cfg_parallel import gather_halves, keep_half
from sporch.runtime.models.split_plans import diffusers_type, split_plan
from sporch.runtime.models.sequence_parallel import SequenceParallel

__all__ = ["ShardedTransformer", "verify_model"]


def _outputs(out) -> tuple[torch.Tensor, ...]:
    """Every tensor a forward returned, in order: a tuple's tensors (LTX-2's and MiniMax-H3's video
    then audio prediction), a diffusers output record's fields, or the tensor itself; a list of one
    tensor per sample (Z-Image's prediction) stacked into one batch."""
    if hasattr(out, "to_tuple"):
        out = out.to_tuple()
    items = out if isinstance(out, (tuple, list)) else (out,)
    if isinstance(out, tuple):
        items = tuple(torch.stack(t) if _per_sample(t) else t for t in items)
    return tuple(t for t in items if torch.is_tensor(t))


def _per_sample(value) -> bool:
    """A non-empty list of tensors of one shape: one prediction per sample."""
    return (isinstance(value, list) and bool(value) and all(torch.is_tensor(t) for t in value)
            and len({tuple(t.shape) for t in value}) == 1)


class ShardedTransformer:
    """``batched``: the forward arguments with one row per sample (the family module's
    ``BATCHED``); with ``ctx.cfg == 2`` the batch (both CFG passes, conditional rows first) is split
    over the cfg group by them, each half runs on its sequence group, and the halves are gathered
    back, so every rank returns the whole batch's output."""

    def __init__(self, model: torch.nn.Module, ctx: ParallelContext | None, *, backend: str = "auto",
                 batched: tuple[str, ...] = ()) -> None:
        self.model, self.ctx, self.backend, self.batched = model, ctx, backend, tuple(batched)
        self.family = require_family(diffusers_type(type(model)).__name__)
        self.plan = split_plan(type(model))
        why = self.family.split_refusal(dict(model.config)) if self.family.split_refusal else None
        if why and ctx is not None and ctx.sequence_size > 1:  # the planner refuses it first
            raise ValueError(f"{type(model).__name__} does not split exactly over {ctx.sequence_size} sequence "
                             f"ranks: {why}")
        # one set of hooks for the runner's lifetime, entered per forward (registered once per model)
        self.sequence = (SequenceParallel(model, ctx, self.plan, local_attention=self.family.local_attention,
                                          backend=backend)
                         if ctx is not None and ctx.sequence_size > 1 else None)

    @torch.no_grad()
    def forward(self, **kwargs) -> torch.Tensor:
        """The model's (first) output: the prediction."""
        return self.forward_all(**kwargs)[0]

    @torch.no_grad()
    def forward_all(self, **kwargs) -> tuple[torch.Tensor, ...]:
        """Every tensor the model returns (a second stream's prediction too: LTX-2's audio), whole."""
        ctx = self.ctx
        if ctx is not None and ctx.cfg == 2:
            return self._cfg_parallel(kwargs)
        return self._sequence(kwargs)

    def _sequence(self, kwargs) -> tuple[torch.Tensor, ...]:
        if self.sequence is None:
            return _outputs(self.model(**kwargs))
        with self.sequence:
            return _outputs(self.model(**kwargs))

    def _cfg_parallel(self, kwargs) -> tuple[torch.Tensor, ...]:
        return tuple(gather_halves(t, self.ctx) for t in self._sequence(keep_half(kwargs, self.batched, self.ctx)))


@torch.no_grad()
def verify_model(model: torch.nn.Module, ctx: ParallelContext, inputs: dict, *, backend: str = "auto",
                   batched: tuple[str, ...] = (), prepare: Callable[[], Any] | None = None) -> dict:
    """Sharded vs unsharded forward of ``inputs`` on this rank: ``max_abs_err``, ``max_rel_err``
    (over max |reference|), ``ref_max_abs``; with several outputs (a second stream: LTX-2's and
    MiniMax-H3's audio) every one is compared, each output's error in ``output_errors`` and the
    largest error (absolute; relative, each over its own reference) reported. ``prepare``: called
    between the two (e.g. compiling the blocks, so the reference runs eager)."""
    refs = [t.float() for t in _outputs(model(**inputs))]
    if prepare is not None:
        prepare()
    gots = [t.float() for t in ShardedTransformer(model, ctx, backend=backend, batched=batched).forward_all(**inputs)]
    if len(gots) != len(refs):
        raise ValueError(f"verify: the sharded model returned {len(gots)} outputs, the unsharded {len(refs)}")
    errs, scales = [], []
    for ref, got in zip(refs, gots):
        check_output(ref, "verify (unsharded reference)")  # NaN would compare as within tolerance
        check_output(got, "verify (sharded output)")
        errs.append(float((got - ref).abs().max()))
        scales.append(float(ref.abs().max()))
    out = {"max_abs_err": max(errs), "max_rel_err": max(e / max(s, 1e-30) for e, s in zip(errs, scales)),
           "ref_max_abs": max(scales)}
    if len(errs) > 1:
        out["output_errors"] = errs
    return out
