"""The transformer(s) a generate job denoises with: one, or Wan2.2 A14B's two experts.

Two experts (``params.boundary_ratio``): ``transformer`` (high noise) runs every step whose
timestep ``t >= boundary_ratio x num_train_timesteps`` with ``guidance_scale``, ``transformer_2``
(low noise) the others with ``guidance_scale_2`` (unset: ``guidance_scale``); whether the CFG
branches run at all follows ``guidance_scale`` alone. That is diffusers' ``WanPipeline`` rule,
compared the same way (the scheduler's timestep tensor against the Python float).

Both experts are built with the same ParallelContext and ``placement.shard_weights`` (the
low-noise one from the folder's ``transformer_2/``, or seeded ``seed + 1`` without weights).
``offload`` keeps the idle expert in host memory: it is built first and moved to the host,
then the high-noise one is built; at the switch the two trade places (``module.to``), and
before the next prompt batch they trade back. The seconds spent moving are recorded.
"""

from __future__ import annotations

import time
from pathlib import Path

import torch

from sporch.orchestrator.models.checkpoint_experts import SECOND
from sporch.orchestrator.models.lora_experts import for_expert
from sporch.runtime.attention.select import run_choice
from sporch.runtime.measure import sync
from sporch.runtime.model import ShardedDiT, build_sharded
from sporch.runtime.parallel import ParallelContext

from .params import GenerateParams


class Experts:
    """``runner(t)``: the ShardedDiT for timestep ``t`` (moved onto the device first when
    offloaded) and ``guidance(t)``: its CFG scale."""

    def __init__(self, params: GenerateParams, runners: list[ShardedDiT], device: torch.device) -> None:
        self.params, self.runners, self.device = params, runners, device
        self.offload = params.experts == "offload" and len(runners) > 1
        self.on_device = 0
        self.move_s = 0.0
        self.moves = 0
        self.boundary: float | None = None  # set from the scheduler (num_train_timesteps)

    @property
    def model(self):
        return self.runners[0].model

    def set_boundary(self, num_train_timesteps: int) -> None:
        if self.params.boundary_ratio is not None:
            self.boundary = self.params.boundary_ratio * num_train_timesteps

    def index(self, t: torch.Tensor) -> int:
        """0 (transformer) or 1 (transformer_2) for timestep ``t``: WanPipeline's comparison."""
        return 0 if self.boundary is None or bool(t >= self.boundary) else 1

    def guidance(self, t: torch.Tensor) -> float:
        if self.index(t) == 0 or self.params.guidance_scale_2 is None:
            return self.params.guidance_scale
        return self.params.guidance_scale_2

    def runner(self, t: torch.Tensor) -> ShardedDiT:
        return self.use(self.index(t))

    def use(self, i: int) -> ShardedDiT:
        """Expert ``i``, on the device (an offloaded pair trades places first)."""
        if self.offload and i != self.on_device:
            sync(self.device)
            start = time.perf_counter()
            self.runners[self.on_device].model.to("cpu")
            self.runners[i].model.to(self.device)
            sync(self.device)
            self.move_s += time.perf_counter() - start
            self.moves += 1
            self.on_device = i
        return self.runners[i]

    def num_parameters(self) -> int:
        return sum(r.model.num_parameters() for r in self.runners)

    def record(self) -> dict:
        return {"count": len(self.runners), "boundary_ratio": self.params.boundary_ratio,
                "boundary_timestep": self.boundary, "placement": self.params.experts if len(self.runners) > 1 else None,
                "moves": self.moves, "move_s": round(self.move_s, 6)}


def build_experts(params: GenerateParams, ctx: ParallelContext | None, shard_weights: str, dtype: torch.dtype,
                  device: torch.device) -> Experts:
    """The job's transformer, and its low-noise expert when the model has one."""
    two = params.boundary_ratio is not None
    offload = two and params.experts == "offload"
    # a cached parameter is shared by its cache entry: moving the module would not free it
    cache = None if offload else getattr(ctx, "weight_cache", None)
    weights = [params.root or None, str(Path(params.root) / SECOND) if params.root else None][:2 if two else 1]
    order = [1, 0] if offload else list(range(len(weights)))  # the one that waits first, then to host
    runners: dict[int, ShardedDiT] = {}
    sharded = ctx is not None and ctx.sequence_size > 1
    backend = run_choice(params.attention_precision, device, dtype, ring=ctx.ring if ctx is not None else 1,
                         joint_sharded=sharded and params.model.get("attention") == "joint").kernel
    for i in order:
        model = build_sharded(params.model, ctx, shard_weights, seed=i, dtype=dtype, device=device,
                              weights=weights[i], cache=cache,
                              lora=for_expert(params.model.get("lora"), i), quant=params.model.get("quant"))
        if offload and i == 1:
            model.to("cpu")
        runners[i] = ShardedDiT(model, ctx, grid=params.grid, backend=backend)
    return Experts(params, [runners[i] for i in range(len(weights))], device)
