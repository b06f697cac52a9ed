"""Run a diffusers transformer of a supported family sharded over a ParallelContext, and compare
it with the same model unsharded (the generic path's verify).

``GenericSharded(model, ctx, family=)``: ``forward(**kwargs)`` -> the model's output, whole on
every rank, computed sequence-parallel over ``ctx``'s sequence group (``SequenceParallel`` with
the class's split plan). ``verify_generic`` -> max abs / relative error against the unsharded
forward of the same inputs.
"""

from __future__ import annotations

from typing import Any, Callable

import torch

from sporch.orchestrator.models.families import require_family
from sporch.runtime.parallel import ParallelContext

from ..finite import check_output
from .cfg_parallel import gather_halves, keep_half
from .plans import diffusers_type, split_plan
from .sequence_parallel import SequenceParallel

__all__ = ["GenericSharded", "verify_generic"]


def _first(out):
    return out[0] if isinstance(out, (tuple, list)) else getattr(out, "sample", out)


class GenericSharded:
    """``batched``: the forward arguments with one row per sample (the family module's
    ``BATCHED``); with ``ctx.cfg == 2`` the batch (both CFG passes, conditional rows first) is split
    over the cfg group by them, each half runs on its sequence group, and the halves are gathered
    back, so every rank returns the whole batch's output."""

    def __init__(self, model: torch.nn.Module, ctx: ParallelContext | None, *, backend: str = "auto",
                 batched: tuple[str, ...] = ()) -> None:
        self.model, self.ctx, self.backend, self.batched = model, ctx, backend, tuple(batched)
        self.family = require_family(diffusers_type(type(model)).__name__)
        self.plan = split_plan(type(model))
        # one set of hooks for the runner's lifetime, entered per forward (registered once per model)
        self.sequence = (SequenceParallel(model, ctx, self.plan, local_attention=self.family.local_attention,
                                          backend=backend)
                         if ctx is not None and ctx.sequence_size > 1 else None)

    @torch.no_grad()
    def forward(self, **kwargs) -> torch.Tensor:
        ctx = self.ctx
        if ctx is not None and ctx.cfg == 2:
            return self._cfg_parallel(kwargs)
        return self._sequence(kwargs)

    def _sequence(self, kwargs) -> torch.Tensor:
        if self.sequence is None:
            return _first(self.model(**kwargs))
        with self.sequence:
            return _first(self.model(**kwargs))

    def _cfg_parallel(self, kwargs) -> torch.Tensor:
        return gather_halves(self._sequence(keep_half(kwargs, self.batched, self.ctx)), self.ctx)


@torch.no_grad()
def verify_generic(model: torch.nn.Module, ctx: ParallelContext, inputs: dict, *, backend: str = "auto",
                   batched: tuple[str, ...] = (), prepare: Callable[[], Any] | None = None) -> dict:
    """Sharded vs unsharded forward of ``inputs`` on this rank: ``max_abs_err``, ``max_rel_err``
    (over max |reference|), ``ref_max_abs``. ``prepare``: called between the two (e.g. compiling
    the blocks, so the reference runs eager)."""
    ref = _first(model(**inputs)).float()
    if prepare is not None:
        prepare()
    got = GenericSharded(model, ctx, backend=backend, batched=batched).forward(**inputs).float()
    check_output(ref, "verify (unsharded reference)")  # NaN would compare as within tolerance
    check_output(got, "verify (sharded output)")
    err = float((got - ref).abs().max())
    scale = float(ref.abs().max())
    return {"max_abs_err": err, "max_rel_err": err / max(scale, 1e-30), "ref_max_abs": scale}
