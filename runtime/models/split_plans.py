"""The split plan of a diffusers transformer class: its own ``_cp_plan`` (diffusers'
``ContextParallelInput`` / ``ContextParallelOutput``) in sporch's records, the table its family
ships for a class without one (``sporch.orchestrator.models.families``), or, for a family's class
with neither, the plan sporch derives from a tiny instance, once checked exact (``derived.py``)."""

from __future__ import annotations

from typing import Any

from sporch.orchestrator.models.families import family_of_class
from sporch.orchestrator.models.families.plan_format import GatherOutput, SplitInput, SplitPlan

from sporch.runtime.models.derived import derived_plan

__all__ = ["split_plan", "from_cp_plan", "diffusers_type"]


def _record(x: Any):
    if hasattr(x, "gather_dim"):
        return GatherOutput(int(x.gather_dim), x.expected_dims)
    return SplitInput(int(x.split_dim), x.expected_dims, bool(x.split_output))


def from_cp_plan(cp_plan: dict) -> SplitPlan:
    """diffusers' ``_cp_plan`` -> the same plan in sporch's records."""
    out: dict = {}
    for name, entry in cp_plan.items():
        if isinstance(entry, dict):
            out[name] = {k: (tuple(_record(x) for x in v) if isinstance(v, (list, tuple)) else _record(v))
                         for k, v in entry.items()}
        elif isinstance(entry, (list, tuple)):
            out[name] = tuple(_record(x) for x in entry)
        else:
            out[name] = _record(entry)
    return out


def diffusers_type(model_cls: type) -> type:
    """The diffusers class of ``model_cls``: itself, or the class FSDP2's ``fully_shard`` derived
    a ``FSDP<Name>`` class from (sharded parameters, ``parallel.shard_weights``)."""
    try:
        from torch.distributed.fsdp import FSDPModule
    except ImportError:  # pragma: no cover - torch without FSDP2
        return model_cls
    if issubclass(model_cls, FSDPModule):
        return next(b for b in model_cls.__bases__ if not issubclass(b, FSDPModule))
    return model_cls


def split_plan(model_cls: type) -> SplitPlan:
    """Where ``model_cls`` splits and gathers: the family's shipped table, else the class's own
    ``_cp_plan``, else (a class of a family) the derived plan, checked exact on gloo ranks and
    cached (``derived.derived_plan``: a class whose derived plan is not exact raises ValueError in
    one line naming it and its largest error). A class of no family raises ValueError naming it."""
    model_cls = diffusers_type(model_cls)
    family = family_of_class(model_cls.__name__)
    shipped = family.split_plans.get(model_cls.__name__) if family is not None else None
    if shipped is not None:
        return shipped
    own = getattr(model_cls, "_cp_plan", None)
    if own:
        return from_cp_plan(own)
    if family is not None:
        return derived_plan(model_cls.__name__)
    raise ValueError(f"{model_cls.__name__} has no _cp_plan and sporch ships no split plan for it")
