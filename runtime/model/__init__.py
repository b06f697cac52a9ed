"""DiT models for sporch: Wan2.1-style video DiT (cross attention), Flux/SD3-style MMDiT
(joint attention), class-conditional DiT (self attention); the same modules run unsharded
(``ctx=None``) and sequence-parallel over a ``sporch.runtime.parallel.ParallelContext``.

Public API (see docs/model.md)::

    model = build_model(plan.model, seed=0, dtype="float32")           # or weights="x.safetensors"
    model = build_sharded(plan.model, ctx, "sequence", seed=0)          # parameters sharded (FSDP2)
    runner = ShardedDiT(model, ctx, grid=plan.sequence.grid)            # ctx=None: one process
    v = runner.forward(latents, timestep, cond, guidance_scale=g)       # full velocity, every rank
    x = generate(model, ctx, grid=..., batch=..., steps=..., guidance_scale=..., seed=...)
    report = verify(model, ctx, grid=..., batch=..., guidance_scale=..., seed=...)
"""

from .base import DiTBase, latent_shape, patchify, unpatchify
from .build import build_model, count_parameters, load_safetensors, resolve_dtype, save_safetensors
from .config import ModelConfig, tiny_model_dict
from .sampler import SampleInputs, euler_sample, flow_sigmas, generate, make_inputs
from .layers import NUM_TRAIN_TIMESTEPS
from .sharded import ShardedDiT, cfg_combine, dp_slice
from .shard_weights import build_sharded, resident_parameter_bytes, shard_model
from .verify import compare, verify
from .weight_cache import WeightCache

__all__ = [
    "DiTBase", "ModelConfig", "ShardedDiT", "SampleInputs", "NUM_TRAIN_TIMESTEPS",
    "build_model", "count_parameters", "load_safetensors", "save_safetensors", "resolve_dtype",
    "tiny_model_dict", "latent_shape", "patchify", "unpatchify",
    "flow_sigmas", "euler_sample", "generate", "make_inputs",
    "cfg_combine", "dp_slice", "compare", "verify",
    "build_sharded", "shard_model", "resident_parameter_bytes", "WeightCache",
]
