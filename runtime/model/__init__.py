"""Models: every family's diffusers transformer class, built from its folder or config, placed as
the plan says (sharded parameters, low-bit weights, LoRA adapters) and run sequence-parallel
(:mod:`.generic`: split plans, USP attention routing, CFG parallel, verify/benchmark/inference);
the step caches (:mod:`.cache`); the pieces both sides of a rank share (:mod:`.dtypes`,
:mod:`.finite`, :mod:`.shards`, :mod:`.weight_cache`, :mod:`.blocks`, :mod:`.tiny_parts`)."""

from .dtypes import DTYPES, resolve_dtype
from .weight_cache import WeightCache

__all__ = ["DTYPES", "resolve_dtype", "WeightCache"]
