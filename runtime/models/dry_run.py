"""A derived split plan run on virtual ranks in one process: does it fit the model's shapes?

:func:`dry_run` runs the forward with the very hooks the sequence-parallel runtime places
(``SequenceParallel``: the plan's splits, its ``segments``), as rank ``r`` of ``P`` would, with no
process group: the attention inside the split region runs locally on the rank's chunk (checking
first that the runtime could route it: no causal mask, no dropout, a mask that only drops keys),
and a gather returns the whole tensor the unsharded forward made there (the reference trace),
after checking that the rank's piece has its shape but for a shorter token dimension. A plan
that raises, that gathers pieces of the wrong shape, that routes no attention at all, or whose
output is not the unsharded output's shape does not fit; one that fits may still be inexact
(the gloo check, ``verdict.py``, decides that).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

import torch
import torch.nn.functional as F

from sporch.orchestrator.models.families.plan_format import GatherOutput, SplitPlan

from sporch.runtime.models.sequence_parallel import SequenceParallel, key_keep
from sporch.runtime.models.trace import Trace, tensors_in

__all__ = ["dry_run", "VIRTUAL_RANKS"]

#: (ranks, rank) the dry run takes: the shorter chunk of 2, the first and last of 4
VIRTUAL_RANKS = ((2, 1), (4, 0), (4, 3))


class DryRunError(Exception):
    pass


@dataclass
class _VirtualRank:
    """What the split hooks read of a ParallelContext."""

    sequence_size: int
    sequence_rank: int
    device: torch.device = torch.device("cpu")
    plan: None = None


class _DryRun(SequenceParallel):
    """The runtime's hooks with the gather and the attention kept on this process."""

    def __init__(self, model, rank: _VirtualRank, plan: SplitPlan, references: list) -> None:
        super().__init__(model, rank, plan)
        self.references = references
        self.gathered = 0

    def _gather(self, args, output, gathers):
        if self.gathered >= len(self.references):
            raise DryRunError("a gather ran more often than the unsharded forward reached it")
        ref = self.references[self.gathered]
        self.gathered += 1
        mine, whole = dict(tensors_in(output)), dict(tensors_in(ref))
        for i, spec in enumerate(gathers):
            if spec is None:
                continue
            path = () if torch.is_tensor(output) else (i,)
            x, y = mine.get(path), whole.get(path)
            if x is None or y is None or x.dim() != y.dim():
                raise DryRunError(f"output {i} at the gather is not the unsharded forward's")
            d = spec.gather_dim % y.dim()
            other = [n for k, n in enumerate(x.shape) if k != d] == [n for k, n in enumerate(y.shape) if k != d]
            if not other or not 0 < x.shape[d] < y.shape[d]:
                raise DryRunError(f"rank {self.ctx.sequence_rank} of {self.ctx.sequence_size} gathers shape "
                                  f"{tuple(x.shape)} along dim {d} of the whole {tuple(y.shape)}")
        self.state.inside = False
        return ref

    def attention(self, query, key, value, attn_mask=None, dropout_p=0.0, is_causal=False, scale=None,
                  enable_gqa=False):
        if is_causal or dropout_p:
            raise DryRunError("an attention inside the split region is causal or has dropout")
        if attn_mask is not None:
            try:
                key_keep(attn_mask, query.shape[0], key.shape[2])
            except NotImplementedError as exc:
                raise DryRunError(str(exc)) from None
        self.state.calls += 1
        return F.scaled_dot_product_attention(query, key, value, attn_mask=attn_mask, scale=scale,
                                              enable_gqa=enable_gqa)


def _gather_modules(plan: SplitPlan) -> list[str]:
    return [m for m, e in plan.items() if isinstance(e, GatherOutput) or
            (isinstance(e, tuple) and any(isinstance(g, GatherOutput) for g in e))]


@torch.no_grad()
def dry_run(model: torch.nn.Module, inputs: dict, plan: SplitPlan, reference: Trace) -> Optional[str]:
    """None when ``plan`` fits ``model`` on every virtual rank of :data:`VIRTUAL_RANKS` (module
    docstring), else why not (one line). ``reference``: the unsharded trace of ``inputs``."""
    gathers = set(_gather_modules(plan))
    references = [c.output for c in reference.calls if c.name in gathers]
    if not references:
        return "its gather point is never reached"
    try:
        for size, rank in VIRTUAL_RANKS:
            sp = _DryRun(model, _VirtualRank(size, rank), plan, references)
            with sp:
                out = model(**inputs)
            out = out[0] if isinstance(out, (tuple, list)) else getattr(out, "sample", out)
            if sp.state.calls == 0:
                return ("no attention module sporch routes (diffusers' Attention or AttentionModuleMixin, "
                        "calling scaled_dot_product_attention) runs on the split tokens")
            if tuple(out.shape) != tuple(reference.output.shape):
                return (f"rank {rank} of {size}: the output has shape {tuple(out.shape)}, the unsharded one "
                        f"{tuple(reference.output.shape)}")
            if not torch.isfinite(out).all():
                return f"rank {rank} of {size}: the output is not finite"
    except DryRunError as exc:
        return str(exc)
    except Exception as exc:  # the model's own code failed on a rank's chunk: the plan does not fit it
        first = (str(exc).strip().splitlines() or [""])[0]
        return f"{type(exc).__name__}: {first[:200]}"
    finally:
        SequenceParallel.remove(model)
    return None
