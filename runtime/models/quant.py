"""Low-bit DiT weights (``plan.model.quant``; docs/performance.md, "Low-bit weights").

After the weights are loaded (and any LoRA merged), every ``nn.Linear`` inside the model's
block lists is quantised in place with torchao's ``quantize_``:

* ``int8_weight``: int8 weights with one scale per output row, dequantised in each matmul
  (torchao ``Int8WeightOnlyConfig``); runs on CPU and GPU.
* ``fp8_weight``: float8 (e4m3) weights, per row (``Float8WeightOnlyConfig``).
* ``fp8_dynamic``: float8 weights per row and float8 activations scaled per token at each call,
  a float8 matmul (``Float8DynamicActivationFloat8WeightConfig`` with ``PerRow``).

The float8 modes need a CUDA GPU of compute capability 8.9+ and are refused elsewhere in one line
(:class:`QuantError`). The embeddings and the output head keep the workload dtype (what the
planner's memory estimate assumes). Quantised weights are whole tensors per rank: the planner
refuses ``model.quant`` with sharded parameters (``parallel.shard_weights``).
"""

from __future__ import annotations

import torch
from torch import nn

from sporch.orchestrator.contract.vocab import FP8_QUANT, QUANT_MODES

from sporch.runtime.models.blocks import block_lists

#: Oldest CUDA compute capability with float8 tensor cores (Ada).
FP8_CAPABILITY = (8, 9)


class QuantError(ValueError):
    """``model.quant`` cannot run here (one line: what and what to do)."""


def _config(mode: str):
    try:
        from torchao.quantization import (Float8DynamicActivationFloat8WeightConfig, Float8WeightOnlyConfig,
                                          Int8WeightOnlyConfig, PerRow)
    except ImportError as exc:  # the runtime extra pins torchao
        raise QuantError(f"model.quant={mode} needs torchao (pip install 'sporch[runtime]'): {exc}") from None
    if mode == "int8_weight":
        return Int8WeightOnlyConfig()
    if mode == "fp8_weight":
        return Float8WeightOnlyConfig()
    return Float8DynamicActivationFloat8WeightConfig(granularity=PerRow())


def check_device(mode: str, device: torch.device | str) -> None:
    """Raise :class:`QuantError` when ``mode`` cannot run on ``device``."""
    if mode not in QUANT_MODES:
        raise QuantError(f"model.quant must be one of {', '.join(QUANT_MODES)}, got {mode!r}")
    if mode not in FP8_QUANT:
        return
    device = torch.device(device)
    if device.type != "cuda":
        raise QuantError(f"model.quant={mode} needs a CUDA GPU of compute capability 8.9+ (float8 matmuls), "
                         f"but this rank runs on {device.type}: use model.quant=int8_weight or none")
    cap = torch.cuda.get_device_capability(device)
    if tuple(cap) < FP8_CAPABILITY:
        raise QuantError(f"model.quant={mode} needs compute capability 8.9+ (float8), but this GPU is "
                         f"{cap[0]}.{cap[1]}: use model.quant=int8_weight or none")


def block_linears(model: nn.Module) -> set[nn.Module]:
    """The ``nn.Linear`` modules inside the model's block lists (what gets quantised)."""
    return {m for _, blocks in block_lists(model) for m in blocks.modules() if isinstance(m, nn.Linear)}


@torch.no_grad()
def quantize_weights(model: nn.Module, mode: str | None, device: torch.device | str | None = None) -> nn.Module:
    """Quantise the block linears of ``model`` in place (``mode`` none: unchanged)."""
    mode = mode or "none"
    if mode == "none":
        return model
    if device is None:
        device = next(model.parameters()).device
    check_device(mode, device)
    from torch.distributed.tensor import DTensor

    if any(isinstance(p, DTensor) for p in model.parameters()):
        raise QuantError(f"model.quant={mode} quantises whole weights, but this model's parameters are sharded "
                         "(parallel.shard_weights): set parallel.shard_weights=none or model.quant=none")
    targets = block_linears(model)
    if not targets:
        raise QuantError(f"model.quant={mode}: {type(model).__name__} has no linear layers in its blocks")
    from torchao.quantization import quantize_

    quantize_(model, _config(mode), filter_fn=lambda module, _name: module in targets)
    return model


def tensor_bytes(t: torch.Tensor) -> int:
    """Bytes a tensor holds, a torchao tensor subclass's inner tensors (data and scales) counted."""
    flatten = getattr(type(t), "__tensor_flatten__", None)
    if flatten is not None and type(t) not in (torch.Tensor, nn.Parameter):
        names, _ = t.__tensor_flatten__()
        return sum(tensor_bytes(getattr(t, n)) for n in names if isinstance(getattr(t, n), torch.Tensor))
    return t.numel() * t.element_size()


def weight_bytes(model: nn.Module) -> int:
    """Bytes of this rank's parameters (quantised weights at their stored size)."""
    return sum(tensor_bytes(p) for p in model.parameters())
