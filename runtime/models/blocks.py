"""A transformer's block lists: the units compiling (runtime/compile.py) and weight sharding
(``shard_weights.py``, FSDP2) work on."""

from __future__ import annotations

from torch import nn


def block_lists(model: nn.Module) -> list[tuple[str, nn.ModuleList]]:
    """The model's transformer block lists: direct ``nn.ModuleList`` children whose name ends in
    ``blocks`` (diffusers' ``blocks``, ``transformer_blocks``, ``single_transformer_blocks``, ...)."""
    return [(name, child) for name, child in model.named_children()
            if isinstance(child, nn.ModuleList) and name.endswith("blocks")]
