"""Run a diffusers transformer of a supported family sharded over a ParallelContext, and compare
it with the same model unsharded (the generic path's verify).

``GenericSharded(model, ctx, family=)``: ``forward(**kwargs)`` -> the model's output, whole on
every rank, computed sequence-parallel over ``ctx``'s sequence group (``SequenceParallel`` with
the class's split plan). ``verify_generic`` -> max abs / relative error against the unsharded
forward of the same inputs.
"""

from __future__ import annotations

import torch

from sporch.orchestrator.contract.families import require_family
from sporch.runtime.parallel import ParallelContext

from .plans import split_plan
from .sequence_parallel import SequenceParallel

__all__ = ["GenericSharded", "verify_generic"]


def _first(out):
    return out[0] if isinstance(out, (tuple, list)) else getattr(out, "sample", out)


class GenericSharded:
    def __init__(self, model: torch.nn.Module, ctx: ParallelContext | None, *, backend: str = "auto") -> None:
        self.model, self.ctx, self.backend = model, ctx, backend
        self.family = require_family(type(model).__name__)
        self.plan = split_plan(type(model))

    @torch.no_grad()
    def forward(self, **kwargs) -> torch.Tensor:
        if self.ctx is None or self.ctx.sequence_size == 1:
            return _first(self.model(**kwargs))
        with SequenceParallel(self.model, self.ctx, self.plan, local_attention=self.family.local_attention,
                              backend=self.backend):
            return _first(self.model(**kwargs))


@torch.no_grad()
def verify_generic(model: torch.nn.Module, ctx: ParallelContext, inputs: dict, *, backend: str = "auto") -> dict:
    """Sharded vs unsharded forward of ``inputs`` on this rank: ``max_abs_err``, ``max_rel_err``
    (over max |reference|), ``ref_max_abs``."""
    ref = _first(model(**inputs)).float()
    got = GenericSharded(model, ctx, backend=backend).forward(**inputs).float()
    err = float((got - ref).abs().max())
    scale = float(ref.abs().max())
    return {"max_abs_err": err, "max_rel_err": err / max(scale, 1e-30), "ref_max_abs": scale}
