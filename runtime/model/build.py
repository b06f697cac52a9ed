"""Build a model from a ``plan.model`` dict with deterministic random weights, or load a
local checkpoint (sporch.runtime.model.keymaps). No hub downloads."""

from __future__ import annotations

import math
import zlib
from typing import Any, Mapping

import torch
from torch import nn

from sporch.orchestrator.contract.sections import ModelSection
from .base import DiTBase
from .config import ModelConfig
from .dit import ClassDiT
from .keymaps import load_checkpoint
from .lora import merge_loras
from .mmdit import MMDiT
from .shards import local_rows
from .wan import WanDiT
from .weight_cache import WeightCache, cache_key

#: Scale of the weights that produce adaLN modulation (keeps random deep stacks tame).
MOD_SCALE = 0.5


def model_class(attention: str) -> type[DiTBase]:
    return {"cross": WanDiT, "joint": MMDiT, "self": ClassDiT}[attention]


def as_config(model: ModelConfig | ModelSection | Mapping[str, Any]) -> ModelConfig:
    """A ModelConfig from itself, the Plan's model section, or a ``plan.model`` dict."""
    if isinstance(model, ModelConfig):
        return model
    return ModelConfig.from_dict(model.to_dict() if isinstance(model, ModelSection) else model)


def param_generator(seed: int, name: str) -> torch.Generator:
    """One generator per parameter, from (seed, name): values do not depend on creation order,
    device, dtype, or which other parameters exist."""
    g = torch.Generator()
    g.manual_seed((int(seed) * 1_000_003 + zlib.crc32(name.encode())) % (2**63 - 1))
    return g


def init_value(name: str, shape: torch.Size, seed: int) -> torch.Tensor:
    """Float32 initial value of parameter ``name`` (CPU)."""
    g = param_generator(seed, name)
    leaf = name.rsplit(".", 1)[-1]
    is_mod = any(k in name for k in ("modulation", "_mod.", "adaLN", "time_projection"))
    if len(shape) >= 2 and leaf == "weight":
        if "embedder" in name and name.startswith("y_"):  # class embedding table
            return torch.randn(shape, generator=g) * 0.5
        fan_in = shape[-1]
        std = 1.0 / math.sqrt(fan_in) * (MOD_SCALE if is_mod else 1.0)
        return torch.randn(shape, generator=g) * std
    if leaf == "modulation":  # Wan-style learned modulation table [1, k, D]
        return torch.randn(shape, generator=g) / math.sqrt(shape[-1])
    if leaf == "weight":  # norm scales
        return 1.0 + 0.1 * torch.randn(shape, generator=g)
    # biases
    return 0.02 * torch.randn(shape, generator=g)


@torch.no_grad()
def init_weights(model: nn.Module, seed: int = 0) -> nn.Module:
    """Fill every parameter from (seed, name); a sharded parameter (FSDP2) gets its rows of the
    same values, so sharded and unsharded models compute the same."""
    for name, p in model.named_parameters():
        if p.device.type == "meta":
            continue
        local, rows = local_rows(p)
        value = init_value(name, p.shape, seed)
        local.copy_((value if rows is None else value[rows]).to(local.dtype))
    return model


def build_model(
    model: ModelConfig | Mapping[str, Any],
    seed: int = 0,
    dtype: torch.dtype | str = torch.float32,
    device: torch.device | str = "cpu",
    weights: str | None = None,
    cache: WeightCache | None = None,
    lora: Any = None,
) -> DiTBase:
    """The model for a ``plan.model`` dict (or ModelConfig), in eval mode.

    Weights are random from ``seed`` (identical on every rank and every run), or loaded from
    ``weights``: a local checkpoint folder or file in the publisher's layout (original or
    diffusers, single file or sharded with an index; sporch.runtime.model.keymaps). ``device="meta"`` builds the shapes only (parameter
    counting for the real presets without allocating). ``cache``: a :class:`WeightCache` shared
    by the points of a pack; a build it has seen takes the cached parameters (no load)."""
    cfg = as_config(model)
    if isinstance(dtype, str):
        dtype = resolve_dtype(dtype)
    device = torch.device(device)
    # Build on meta (no allocation, no draws from the global RNG by the default
    # initialisers), then allocate and fill from our own seeded generators.
    m = model_class(cfg.attention)(cfg, device=torch.device("meta"), dtype=dtype)
    if device.type != "meta" and cache is not None:
        key = cache_key(cfg.to_dict(), weights=weights, seed=seed, dtype=dtype, device=device, lora=lora)
        params = cache.parameters(key, lambda: build_model(cfg, seed=seed, dtype=dtype, device=device,
                                                           weights=weights, lora=lora))
        m.load_state_dict(params, strict=True, assign=True)
    elif device.type != "meta":
        m = m.to_empty(device=device)
        if weights:
            load_safetensors(m, weights)
        else:
            init_weights(m, seed)
        merge_loras(m, lora)
    return m.eval().requires_grad_(False)


def resolve_dtype(name: str | torch.dtype) -> torch.dtype:
    if isinstance(name, torch.dtype):
        return name
    table = {"float32": torch.float32, "fp32": torch.float32, "bfloat16": torch.bfloat16,
             "bf16": torch.bfloat16, "float16": torch.float16, "fp16": torch.float16}
    try:
        return table[str(name)]
    except KeyError:
        raise ValueError(f"unknown dtype {name!r}; expected one of {sorted(table)}") from None


def count_parameters(model: ModelConfig | Mapping[str, Any]) -> int:
    """Parameter count of a config, built on the meta device (no memory)."""
    return build_model(model, device="meta").num_parameters()


def save_safetensors(model: nn.Module, path: str) -> None:
    from safetensors.torch import save_file

    save_file({k: v.detach().contiguous().cpu() for k, v in model.state_dict().items()}, path)


def load_safetensors(model: nn.Module, path: str) -> nn.Module:
    """Load local weights into ``model``: a file or folder in sporch's own names, the original
    release's or diffusers' layout (see sporch.runtime.model.keymaps). Strict: every parameter
    present with its shape, nothing else; a CheckpointError (one line) otherwise."""
    return load_checkpoint(model, path)
