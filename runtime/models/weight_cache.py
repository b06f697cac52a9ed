"""Weights kept across the points of a pack (``python -m sporch.runtime.pack``).

Under sequence parallelism every rank holds the same whole model whatever the layout, so the
points of a pack that share a model, weights, seed, dtype and device load (or draw) its weights
once: the first build fills the cache, every later one builds the modules on the meta device
and takes the cached tensors as its parameters (``load_state_dict(assign=True)``: no copy, no
second resident model). The workloads never write to parameters (``requires_grad_(False)``,
inference only), so sharing them is safe. Sharded parameters (``placement.shard_weights``) are
not cached: their shards belong to one layout's groups.
"""

from __future__ import annotations

import json
from typing import Any, Callable

import torch
from torch import nn

__all__ = ["WeightCache", "cache_key"]


def cache_key(config: dict[str, Any], *, weights: str | None, seed: int, dtype: torch.dtype,
              device: torch.device, lora: Any = None) -> str:
    """What makes two builds' parameters equal: the model's config, its checkpoint (or the
    seed of its random weights), its LoRA adapters, dtype and device."""
    return json.dumps({"config": config, "weights": weights, "seed": None if weights else int(seed),
                       "dtype": str(dtype), "device": str(device), "lora": lora or None}, sort_keys=True, default=str)


class WeightCache:
    """Parameters by :func:`cache_key`; ``loads`` counts the builds that filled it, ``hits``
    the builds it served (recorded in each point's metrics as ``weight_cache``)."""

    def __init__(self) -> None:
        self._entries: dict[str, dict[str, torch.Tensor]] = {}
        self.loads = 0
        self.hits = 0

    def __len__(self) -> int:
        return len(self._entries)

    def parameters(self, key: str, build: Callable[[], nn.Module]) -> dict[str, torch.Tensor]:
        """The cached parameters under ``key``; on a miss, ``build()``'s (a model built for real)."""
        entry = self._entries.get(key)
        if entry is None:
            model = build()
            entry = self._entries[key] = {k: v.detach() for k, v in model.state_dict().items()}
            self.loads += 1
        else:
            self.hits += 1
        return entry

    def stats(self) -> dict[str, int]:
        return {"loads": self.loads, "hits": self.hits, "models": len(self._entries)}
