"""Sharded vs unsharded: the numbers behind ``workload.kind == "verify"``."""

from __future__ import annotations

from typing import Any, Sequence

import torch
import torch.distributed as dist

from sporch.runtime import faults
from sporch.runtime.parallel import ParallelContext

from .base import DiTBase
from .finite import check_output
from .sampler import generate, make_inputs
from .layers import NUM_TRAIN_TIMESTEPS
from .sharded import ShardedDiT


def compare(out: torch.Tensor, ref: torch.Tensor) -> dict[str, float]:
    """``max_abs_err`` and ``max_rel_err`` = max|out - ref| / max|ref|."""
    out, ref = out.double(), ref.double()
    abs_err = float((out - ref).abs().max()) if out.numel() else 0.0
    scale = float(ref.abs().max()) if ref.numel() else 0.0
    return {"max_abs_err": abs_err, "max_rel_err": abs_err / scale if scale > 0 else abs_err, "ref_max_abs": scale}


def default_tolerance(dtype: torch.dtype) -> float:
    return 1e-5 if dtype == torch.float32 else (2e-2 if dtype == torch.bfloat16 else 5e-3)


@torch.no_grad()
def verify(model: DiTBase, ctx: ParallelContext | None, *, grid: Sequence[int], batch: int = 1, seed: int = 0,
           guidance_scale: float = 1.0, sigma: float = 0.7, steps: int = 0, shift: float = 1.0,
           backend: str = "auto", tolerance: float | None = None) -> dict[str, Any]:
    """Run one forward (and, with ``steps > 0``, a ``steps``-step sampling) sharded over
    ``ctx`` and unsharded in this process, on the same seeded inputs (this rank's dp rows).
    Collective: every rank of the world must call it. Returns this rank's errors:
    ``{"forward": {...}, "sample": {...} (if steps), "max_rel_err", "tolerance", "ok"}``."""
    inputs = make_inputs(model, grid, batch, seed, ctx)
    g = torch.Generator().manual_seed(int(seed) + 2)
    x0 = torch.randn((batch,) + tuple(inputs.noise.shape[1:]), generator=g)[inputs.rows]
    x = (1 - sigma) * x0 + sigma * inputs.noise
    t = sigma * NUM_TRAIN_TIMESTEPS
    kw = dict(guidance_scale=guidance_scale, null_cond=inputs.null_cond)
    runner = ShardedDiT(model, ctx, grid=grid, backend=backend)
    v = runner.velocity(runner.shard_latents(x), t, inputs.cond, **kw)
    if faults.wrong_shard(dist.get_rank() if ctx is not None else 0):
        v = v + 1.0  # test hook: this rank's shard is wrong, so the gathered output is wrong on every rank
    out = runner.gather_latents(v)
    ref = ShardedDiT(model, None, grid=grid).forward(x, t, inputs.cond, **kw)
    check_output(out, "verify (sharded forward)")  # a NaN error compares as within any tolerance
    check_output(ref, "verify (unsharded forward)")
    result: dict[str, Any] = {"forward": compare(out, ref)}
    worst = result["forward"]["max_rel_err"]
    if steps > 0:
        skw = dict(grid=grid, steps=steps, guidance_scale=guidance_scale, shift=shift, inputs=inputs)
        s_out = generate(model, ctx, backend=backend, **skw)
        s_ref = generate(model, None, **skw)
        check_output(s_out, "verify (sharded sampling)")
        check_output(s_ref, "verify (unsharded sampling)")
        result["sample"] = compare(s_out, s_ref)
        worst = max(worst, result["sample"]["max_rel_err"])
    tol = default_tolerance(model.dtype) if tolerance is None else tolerance
    result.update(max_rel_err=worst, tolerance=tol, ok=bool(worst <= tol))
    return result
