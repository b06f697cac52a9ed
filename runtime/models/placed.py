"""The one model path's transformer as the plan places it: sharded parameters (``parallel.shard_weights``)
and low-bit weights (``model.quant``).

:func:`build_transformer` is the one builder verify, benchmark and generate call:

* unsharded (``shard_weights`` none, or no ParallelContext): the folder's weights
  (:func:`.build.load_diffusers`) or the config with seeded random weights, the plan's LoRA adapters
  merged (``lora.py``), then ``model.quant`` applied to the block linears by
  :func:`sporch.runtime.models.quant.quantize_weights` (torchao);
* sharded (``sequence`` / ``world``): the diffusers class built with its parameters on the meta device,
  FSDP2 applied by :func:`sporch.runtime.models.shard_weights.shard_model` (one unit per ``*blocks``
  entry, then the root), this rank's shard allocated, and each
  parameter's rows read from the checkpoint's memory-mapped safetensors by
  :func:`.checkpoint.fill_parameters` (a slice of the mapped file per run of rows, never the whole
  model; an original release's names mapped by diffusers' converter; strict, non-finite weights
  refused). The buffers the config derives (RoPE tables) are built real and kept. Without weights (a plan of a config with
  random weights: tests, tiny runs) the seeded random model is built whole, then sharded: the same
  values as unsharded.

The plan's LoRA adapters are merged after loading: whole parameters by diffusers' loader and PEFT
(``lora.apply_lora``), sharded ones row by row, each rank its rows (``lora.merge_lora_rows``).

Refused (:class:`~sporch.runtime.models.quant.QuantError`, one line; the planner refuses it first):
``model.quant`` with sharded parameters (quantised weights are whole tensors).
"""

from __future__ import annotations

from typing import Any, Mapping, Sequence

import torch

from sporch.orchestrator.models.families import require_family
from sporch.runtime.parallel import ParallelContext

from sporch.runtime.models.quant import quantize_weights
from sporch.runtime.models.shard_weights import refuse_quant, shard_mesh, shard_model
from sporch.runtime.models.build import allocate, diffusers_class, load_diffusers, meta_model, prepare_model, random_diffusers
from sporch.runtime.models.checkpoint import fill_parameters, open_weights
from sporch.runtime.models.lora import apply_lora, merge_lora_rows
from sporch.runtime.models.split_plans import diffusers_type

__all__ = ["build_transformer", "load_sharded"]


def load_sharded(path: str, ctx: ParallelContext, mode: str, *, dtype: torch.dtype = torch.float32,
                 device: torch.device | str = "cpu", config: Mapping[str, Any] | None = None) -> torch.nn.Module:
    """The diffusers transformer of the checkpoint at ``path`` with its parameters sharded (FSDP2) over
    ``shard_group(ctx, mode)``, each rank reading only its rows (see the module docstring)."""
    device = torch.device(device)
    ckpt, fmt = open_weights(path, config)
    model = meta_model(diffusers_class(fmt.class_name), fmt.config, dtype)
    shard_model(model, shard_mesh(ctx, mode, device), forward_method=None)
    model = allocate(model, device)  # this rank's shard of every parameter; the derived buffers kept
    fill_parameters(model, ckpt, fmt)  # its rows, from the memory-mapped files
    return prepare_model(model)


def _lora_loader(model: torch.nn.Module, lora) -> str | None:
    """The family's diffusers LoRA loader mixin (looked up only when there are adapters), by the
    model's diffusers class (FSDP2 wraps a sharded model's class in ``FSDP<class>``)."""
    return require_family(diffusers_type(type(model)).__name__).lora_loader if lora else None


def build_transformer(*, weights: str | None, class_name: str, config: Mapping[str, Any] | None, ctx: ParallelContext | None,
                      shard_weights: str = "none", quant: str | None = None, lora: Sequence[Mapping[str, Any]] | None = None,
                      seed: int = 0, dtype: torch.dtype = torch.float32, device: torch.device | str = "cpu") -> torch.nn.Module:
    """The plan's transformer: ``weights`` (a checkpoint in any format sporch reads; ``config``: the
    plan's diffusers config, for one that ships none) or ``class_name`` + ``config`` with
    seeded random weights; placed as ``shard_weights`` (over ``ctx``) and ``quant`` say, with the
    adapters ``lora`` merged. See the module docstring."""
    device = torch.device(device)
    sharded = (shard_weights or "none") != "none" and ctx is not None
    if sharded:
        refuse_quant(quant, shard_weights)
    if sharded and weights:
        model = load_sharded(weights, ctx, shard_weights, dtype=dtype, device=device, config=config)
        merge_lora_rows(model, lora, _lora_loader(model, lora))
        return model
    if weights:
        model = load_diffusers(weights, dtype=dtype, device=device, config=config)
    else:
        model = random_diffusers(class_name, dict(config or {}), seed=seed, dtype=dtype).to(device)
    if sharded:  # random weights: built whole (the same values as unsharded), then sharded
        model = shard_model(model, shard_mesh(ctx, shard_weights, device), forward_method=None)
        merge_lora_rows(model, lora, _lora_loader(model, lora))  # each rank its rows, as from a folder
        return model
    apply_lora(model, lora, _lora_loader(model, lora))
    return quantize_weights(model, quant, device)  # after load and LoRA
