"""The model side of a Plan's workload: inference, benchmark, verify.

``run_model_workload(plan, ctx)`` is what the rank entry point (or a job's ``entrypoint``)
calls on every rank after building the ParallelContext. It reads ``plan.model``,
``plan.workload`` and ``plan.sequence`` (docs/contracts.md) and returns a JSON-able dict of
metrics for this rank.
"""

from __future__ import annotations

import statistics
import time
from pathlib import Path
from typing import Any

import torch

from .build import build_model, resolve_dtype
from .sampler import generate, make_inputs
from .sharded import NUM_TRAIN_TIMESTEPS, ShardedDiT
from .verify import verify


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def workload_grid(plan: Any) -> list[int]:
    grid = plan.sequence.get("grid") if plan.sequence else None
    if grid:
        return [int(g) for g in grid]
    seq_len = plan.sequence.get("seq_len") or plan.workload.get("seq_len")
    if not seq_len:
        raise ValueError("plan.sequence has neither grid nor seq_len")
    return [1, 1, int(seq_len)]


def run_model_workload(plan: Any, ctx: Any, *, output_dir: str | Path | None = None,
                       backend: str = "auto", weights: str | None = None) -> dict[str, Any]:
    """Run ``plan.workload.kind`` on this rank (collective: every rank calls it).

    * ``inference``: ``steps`` Euler steps with guidance; the first rank of each dp replica's
      sequence/cfg group writes ``latents_dp<i>.safetensors`` under ``output_dir`` (if given).
    * ``benchmark``: ``warmup`` + ``repeat`` timed denoising steps (one model evaluation with
      CFG, on the local shard); reports median/mean/min milliseconds per step.
    * ``verify``: sharded vs unsharded forward (and ``min(steps, 2)`` sampling steps): errors.

    Weights: ``weights`` or ``plan.model["weights"]`` (local safetensors), else random from
    ``workload.seed``."""
    wl = plan.workload
    kind = wl.get("kind", "inference")
    dtype = resolve_dtype(wl.get("dtype") or "float32")
    seed = int(wl.get("seed") or 0)
    batch = int(wl.get("batch") or 1)
    steps = int(wl.get("steps") or 1)
    guidance = float(wl.get("guidance_scale") or 1.0)
    shift = float(wl.get("shift") or 1.0)
    grid = workload_grid(plan)
    device = getattr(ctx, "device", torch.device("cpu")) if ctx is not None else torch.device("cpu")
    weights = weights or plan.model.get("weights")

    t0 = time.perf_counter()
    model = build_model(plan.model, seed=seed, dtype=dtype, device=device, weights=weights)
    _sync(device)
    out: dict[str, Any] = {"kind": kind, "build_s": time.perf_counter() - t0, "grid": grid,
                           "seq_len": grid[0] * grid[1] * grid[2], "parameters": model.num_parameters(),
                           "dtype": str(dtype).replace("torch.", "")}

    if kind == "verify":
        res = verify(model, ctx, grid=grid, batch=batch, seed=seed, guidance_scale=guidance,
                     steps=min(steps, 2), shift=shift, backend=backend)
        out.update(res)
        return out

    if kind == "benchmark":
        runner = ShardedDiT(model, ctx, grid=grid, backend=backend)
        inputs = make_inputs(model, grid, batch, seed, ctx)
        x_local = runner.shard_latents(inputs.noise)
        times = []
        warmup, repeat = int(wl.get("warmup") or 1), int(wl.get("repeat") or 3)
        for i in range(warmup + repeat):
            _sync(device)
            start = time.perf_counter()
            runner.velocity(x_local, 0.5 * NUM_TRAIN_TIMESTEPS, inputs.cond, guidance_scale=guidance,
                            null_cond=inputs.null_cond)
            _sync(device)
            if i >= warmup:
                times.append((time.perf_counter() - start) * 1e3)
        out.update(step_ms_median=statistics.median(times), step_ms_mean=statistics.fmean(times),
                   step_ms_min=min(times), step_ms=times, local_tokens=runner.local_len)
        return out

    if kind != "inference":
        raise ValueError(f"unknown workload kind {kind!r}")
    t0 = time.perf_counter()
    x = generate(model, ctx, grid=grid, batch=batch, steps=steps, guidance_scale=guidance, seed=seed,
                 shift=shift, backend=backend)
    _sync(device)
    out.update(sample_s=time.perf_counter() - t0, latent_shape=list(x.shape),
               latent_mean=float(x.mean()), latent_std=float(x.std()) if x.numel() > 1 else 0.0)
    writer = ctx is None or (ctx.sequence_rank == 0 and ctx.cfg_rank == 0)
    if output_dir is not None and writer:
        from safetensors.torch import save_file

        dp_i = 0 if ctx is None else ctx.dp_rank
        path = Path(output_dir) / f"latents_dp{dp_i}.safetensors"
        path.parent.mkdir(parents=True, exist_ok=True)
        save_file({"latents": x.contiguous().cpu()}, str(path))
        out["latents_path"] = str(path)
    return out
