"""Sharded DiT parameters (``parallel.shard_weights``): torch's FSDP2 for inference.

``build_sharded(model_dict, ctx, "sequence" | "world", ...)`` builds the model on the meta
device, applies ``fully_shard`` to every block (one FSDP unit each) and to the root (the
embeddings and the head), allocates only this rank's shard, and fills it from the seeded
initialiser or from the checkpoint (each rank reads its rows out of the memory-mapped files:
no rank ever materialises the whole model). In a forward, each block's parameters are
all-gathered before it runs (the next block's gather is prefetched) and freed after it
(``reshard_after_forward``), so a rank holds 1/n of the parameters plus about two blocks.

The shard group: ``sequence`` = the rank's ring x ulysses group (each dp / cfg replica keeps
its own sharded copy; its gathers stay where the sequence group's traffic goes), ``world`` =
every rank (least memory; every rank must run the same number of forwards, which the
workloads do step by step).

The model's own entry point is ``forward_tokens`` (ShardedDiT calls it, not ``forward``): it
is registered with FSDP so that its root all-gather runs there too.
"""

from __future__ import annotations

from typing import Any, Sequence

import torch
import torch.distributed as dist

from sporch.runtime.parallel import ParallelContext

from .base import DiTBase, block_lists
from .build import as_config, build_model, init_weights, load_safetensors, model_class, resolve_dtype
from .lora import merge_loras
from .quant import QuantError, quantize_weights, tensor_bytes

#: What ``plan.placement.shard_weights`` may say.
MODES = ("none", "sequence", "world")


def shard_group(ctx: ParallelContext, mode: str):
    """The process group one copy of the parameters is sharded over."""
    if mode == "sequence":
        return ctx.group("sequence")
    if mode == "world":
        return dist.group.WORLD
    raise ValueError(f"shard_weights must be one of {', '.join(MODES[1:])} here, got {mode!r}")


def shard_model(model: torch.nn.Module, mesh, forward_method: str | None = "forward_tokens") -> torch.nn.Module:
    """Apply FSDP2 to ``model`` in place: one unit per block (``base.block_lists``: the direct
    ``*blocks`` module lists, a diffusers transformer's too), then the root. ``forward_method``:
    the model's entry point other than ``forward`` that runs the root's gather (the hand-built
    models' ``forward_tokens``; None for a diffusers model, called through ``forward``)."""
    from torch.distributed.fsdp import fully_shard, register_fsdp_forward_method

    lists = block_lists(model)
    if not lists:
        raise ValueError(f"{type(model).__name__} has no '*blocks' module list to shard")
    order = [block for _, blocks in lists for block in blocks]  # the order forward_tokens runs them
    for block in order:
        fully_shard(block, mesh=mesh, reshard_after_forward=True)
    fully_shard(model, mesh=mesh, reshard_after_forward=True)
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


def build_sharded(model: Any, ctx: ParallelContext | None, mode: str, *, seed: int = 0,
                  dtype: torch.dtype | str = torch.float32, device: torch.device | str = "cpu",
                  weights: str | None = None, cache: Any = None, lora: Any = None,
                  quant: str | None = None) -> DiTBase:
    """The model of ``model`` (a ``plan.model`` dict or ModelConfig) with its parameters
    sharded over ``shard_group(ctx, mode)``; ``mode`` "none", or no ``ctx`` (one process),
    builds the plain model (from ``cache``, a :class:`WeightCache`, where it has the weights;
    sharded parameters are never cached: their shards belong to one layout's groups)."""
    if mode == "none" or ctx is None:
        built = build_model(model, seed=seed, dtype=dtype, device=device, weights=weights, cache=cache, lora=lora)
        return quantize_weights(built, quant, device)  # model.quant: after load and LoRA (runtime/model/quant.py)
    refuse_quant(quant, mode)
    cfg = as_config(model)
    dtype = resolve_dtype(dtype)
    device = torch.device(device)
    m = model_class(cfg.attention)(cfg, device=torch.device("meta"), dtype=dtype)
    shard_model(m, shard_mesh(ctx, mode, device))
    m = m.to_empty(device=device)  # this rank's shard only
    if weights:
        load_safetensors(m, weights)
    else:
        init_weights(m, seed)
    merge_loras(m, lora)  # each rank its rows of every update (sporch.runtime.model.lora)
    return m.eval().requires_grad_(False)


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

