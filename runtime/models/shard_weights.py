"""Sharded transformer parameters (``parallel.shard_weights``): torch's FSDP2 for inference.

:func:`shard_model` applies ``fully_shard`` to every block of a diffusers transformer (one FSDP
unit each) and to the root (the embeddings and the head); the builder (models/placed.py)
allocates only this rank's shard and fills it from the checkpoint (each rank reads its rows out of
the memory-mapped files: no rank ever materialises the whole model). In a forward, each block's
parameters are all-gathered before it runs (the next block's gather is prefetched) and freed after
it (``reshard_after_forward``), so a rank holds 1/n of the parameters plus about two blocks.

The shard group: ``sequence`` = the rank's ring x ulysses group (each dp / cfg replica keeps
its own sharded copy; its gathers stay where the sequence group's traffic goes), ``world`` =
every rank (least memory; every rank must run the same number of forwards, which the
workloads do step by step).
"""

from __future__ import annotations

from typing import Any, Sequence

import torch
import torch.distributed as dist

from sporch.runtime.parallel import ParallelContext

from sporch.runtime.models.blocks import block_lists
from sporch.runtime.models.quant import QuantError, tensor_bytes

#: What ``plan.placement.shard_weights`` may say.
MODES = ("none", "sequence", "world")


def shard_group(ctx: ParallelContext, mode: str):
    """The process group one copy of the parameters is sharded over."""
    if mode == "sequence":
        return ctx.group("sequence")
    if mode == "world":
        return dist.group.WORLD
    raise ValueError(f"shard_weights must be one of {', '.join(MODES[1:])} here, got {mode!r}")


def shard_model(model: torch.nn.Module, mesh, forward_method: str | None = None) -> torch.nn.Module:
    """Apply FSDP2 to ``model`` in place: one unit per block (``blocks.block_lists``: the direct
    ``*blocks`` module lists), then the root; parameters of another dtype than the model's (kept
    in float32 by the class) are left whole on every rank. ``forward_method``: an entry point other than
    ``forward`` that runs the root's gather (None: the model is called through ``forward``)."""
    from torch.distributed.fsdp import fully_shard, register_fsdp_forward_method

    lists = block_lists(model)
    if not lists:
        raise ValueError(f"{type(model).__name__} has no '*blocks' module list to shard")
    order = [block for _, blocks in lists for block in blocks]  # the order forward_tokens runs them
    # FSDP2 shards one dtype per unit: parameters the class keeps in float32 in a half-precision model
    # (``_keep_in_fp32_modules``: norms, modulation tables, Wan's time embedder) stay whole on every rank
    counts: dict[torch.dtype, int] = {}
    for p in model.parameters():
        counts[p.dtype] = counts.get(p.dtype, 0) + p.numel()
    main = max(counts, key=counts.get) if counts else None
    ignored = {p for p in model.parameters() if p.dtype != main}
    for block in order:
        fully_shard(block, mesh=mesh, reshard_after_forward=True, ignored_params=ignored)
    fully_shard(model, mesh=mesh, reshard_after_forward=True, ignored_params=ignored)
    for block, following in zip(order, order[1:]):
        block.set_modules_to_forward_prefetch([following])  # gather the next block while this one runs
    if forward_method is not None:
        register_fsdp_forward_method(model, forward_method)
    return model


def refuse_quant(quant: str | None, mode: str) -> None:
    """``model.quant`` with sharded parameters: a one-line QuantError (quantised weights are whole tensors)."""
    if (quant or "none") != "none":
        raise QuantError(f"model.quant={quant} quantises whole weights, but parallel.shard_weights={mode} shards them: "
                         "set parallel.shard_weights=none or model.quant=none")


def shard_mesh(ctx: ParallelContext, mode: str, device: torch.device) -> Any:
    """The device mesh of ``shard_group(ctx, mode)`` that FSDP2 shards over."""
    from torch.distributed.device_mesh import DeviceMesh

    return DeviceMesh.from_group(shard_group(ctx, mode), device.type)


def resident_parameter_bytes(model: torch.nn.Module) -> int:
    """Bytes of parameters this rank holds now: every parameter's local shard (all of it when
    not sharded), plus the full parameters of every FSDP unit gathered or being gathered at this
    moment (inside a forward: the running block, the prefetched one, the root). The second part
    reads FSDP2's unit state (torch internals; 0 where this torch does not expose it)."""
    from torch.distributed.tensor import DTensor

    sharded = hasattr(model, "_get_fsdp_state")  # fully_shard made it an FSDP module
    total = 0
    for p in model.parameters():
        if isinstance(p, DTensor):
            t = p.to_local()
            total += t.numel() * t.element_size()
        elif not sharded:  # a sharded model's plain parameters are gathered units': counted below
            total += tensor_bytes(p)  # a quantised weight (model.quant) at its stored size
    for group in _unit_groups(model):
        if getattr(group, "is_unsharded", False) or getattr(group, "_all_gather_result", None) is not None:
            for fp in getattr(group, "fsdp_params", ()):
                sp = fp.sharded_param  # a DTensor: numel() is the full parameter's
                total += sp.numel() * sp.element_size()
    return total


def _unit_groups(model: torch.nn.Module) -> list:
    """Every FSDP2 parameter group in ``model``, once (a unit of several modules, e.g. a text
    encoder's tied embedding tables, shares one state between them)."""
    out: dict[int, Any] = {}
    for module in model.modules():
        get = getattr(module, "_get_fsdp_state", None)
        if get is None:
            continue
        state = get()
        groups = getattr(state, "_fsdp_param_groups", None)
        if groups is None:
            one = getattr(state, "_fsdp_param_group", None)
            groups = [one] if one is not None else []
        out.update((id(g), g) for g in groups if g is not None)
    return list(out.values())


class ParameterPeak:
    """The most parameter bytes this rank held at any unit's start or end during the forwards run
    inside ``with ParameterPeak(model) as peak:`` (``peak.bytes``): the shard, the gathered
    running and prefetched blocks, the root. ``model`` may be several modules (their bytes summed);
    ``units``: the modules whose forwards are sampled (default: every block of ``block_lists``)."""

    def __init__(self, model: torch.nn.Module | Sequence[torch.nn.Module],
                 units: Sequence[torch.nn.Module] | None = None) -> None:
        self.models = [model] if isinstance(model, torch.nn.Module) else list(model)
        self.units = units
        self.bytes = 0
        self._handles: list = []

    def _sample(self, *_args, **_kwargs) -> None:
        self.bytes = max(self.bytes, sum(resident_parameter_bytes(m) for m in self.models))

    def __enter__(self) -> "ParameterPeak":
        units = self.units if self.units is not None else [
            block for m in self.models for _, blocks in block_lists(m) for block in blocks]
        for unit in units:  # after FSDP's own pre-forward hook: the unit is gathered
            self._handles.append(unit.register_forward_pre_hook(self._sample))
            self._handles.append(unit.register_forward_hook(self._sample))
        self._sample()
        return self

    def __exit__(self, *exc) -> None:
        for h in self._handles:
            h.remove()
        self._handles.clear()

