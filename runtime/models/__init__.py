"""Models: every family's diffusers transformer class, built from its folder or config
(:mod:`.build`, :mod:`.checkpoint`, :mod:`.original`), placed as the plan says (:mod:`.placed`:
sharded parameters, low-bit weights, LoRA adapters) and run sequence-parallel and exact (split
plans shipped, the class's own or derived: :mod:`.split_plans`, :mod:`.derive`; the hooks:
:mod:`.sequence_parallel`; CFG parallel; verify, benchmark and inference: :mod:`.workload`);
the step caches (:mod:`.cache`); one module per family with its runtime parts
(:mod:`.families`); the pieces both sides of a rank share (:mod:`.dtypes`, :mod:`.finite`,
:mod:`.shards`, :mod:`.weight_cache`, :mod:`.blocks`, :mod:`.tiny_parts`). Its torch-free
counterpart is ``sporch.orchestrator.models`` (docs/architecture.md)."""

from sporch.runtime.models.dtypes import DTYPES, resolve_dtype
from sporch.runtime.models.weight_cache import WeightCache

__all__ = ["DTYPES", "resolve_dtype", "WeightCache"]
