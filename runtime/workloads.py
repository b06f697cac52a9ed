"""What a rank runs: the job's own entrypoint, or the built-in DiT workloads.

- ``entrypoint: "pkg.module:function"`` in job.yaml: ``function(ctx, plan)`` is called on
  every rank with the ParallelContext and the Plan (``plan.job`` is the resolved job config,
  ``plan.model`` / ``plan.workload`` / ``plan.sequence`` the rest). It may return a dict of
  JSON-able metrics.
- ``inference``: the flow-matching Euler sampler; progress (each rank's latent shard) is
  saved after every step, so a requeued job resumes from its last finished step.
- ``benchmark``: ``warmup`` untimed + ``repeat`` timed denoising steps (one model
  evaluation with CFG each); per-step latency, tokens/s, peak memory, bytes sent and time in
  communication; finished steps are saved, so a requeued benchmark continues where it was.
- ``generate``: prompts -> text encoders -> the sharded transformer with the pipeline's
  scheduler -> VAE -> one MP4/PNG per prompt (runtime/pipelines/, docs/generate.md).
- ``verify``: the sharded forward and a short sampling run against the unsharded model
  (computed on every rank from the same seeded inputs); max error against the tolerance.
"""

from __future__ import annotations

import importlib
import statistics
import time
from typing import Any, Callable

import torch
from torch.profiler import ProfilerActivity, profile

from sporch.orchestrator.benchstats import step_summary
from sporch.orchestrator.models.lora_experts import for_expert
from sporch.orchestrator.contract.plan import Plan
from sporch.orchestrator.contract.sections import compile_off_reason
from sporch.runtime.attention import CommStats
from sporch.runtime.attention.select import Choice, run_choice
from sporch.runtime.compile import CompileInfo, compile_blocks, time_first_call
from sporch.runtime.measure import peak_memory_bytes, sync
from sporch.runtime.model import (
    NUM_TRAIN_TIMESTEPS,
    ShardedDiT,
    build_sharded,
    resident_parameter_bytes,
    euler_sample,
    flow_sigmas,
    make_inputs,
    resolve_dtype,
    verify,
)
from sporch.runtime.model.cache import make_step_cache
from sporch.runtime.model.cache.agreement import agreed_fields
from sporch.runtime.model.finite import check_output
from sporch.runtime.model.generic.workload import run_generic
from sporch.runtime.parallel import ParallelContext
from sporch.runtime.pipelines.generate import run_generate
from sporch.runtime.preflight import run as run_preflight
from sporch.runtime.progress import Progress


def resolve_entrypoint(spec: str) -> Callable[..., Any]:
    module, sep, attr = spec.partition(":")
    if not sep or not module or not attr:
        raise ValueError(f"entrypoint {spec!r} must look like 'package.module:function'")
    fn = importlib.import_module(module)
    for part in attr.split("."):
        fn = getattr(fn, part)
    if not callable(fn):
        raise TypeError(f"entrypoint {spec!r} is not callable")
    return fn


def attention_choice(plan: Plan, ctx: ParallelContext | None, device: torch.device) -> Choice:
    """The attention kernel of ``workload.attention_precision`` here (exact: ``auto``'s)."""
    sharded = ctx is not None and ctx.sequence_size > 1
    return run_choice(plan.workload.attention_precision, device, plan.workload.dtype,
                      ring=ctx.ring if ctx is not None else 1, joint_sharded=sharded and plan.model.attention == "joint")


def run_workload(plan: Plan, ctx: ParallelContext, device: torch.device, progress: Progress) -> dict[str, Any]:
    result = _run_workload(plan, ctx, device, progress)
    if plan.workload.attention_precision != "exact" and not plan.job.entrypoint:
        choice = attention_choice(plan, ctx, device)
        result.setdefault("attention_kernel", choice.kernel)
        result.setdefault("attention_choice", choice.reason)  # the generic path records its own
    return result


def _run_workload(plan: Plan, ctx: ParallelContext, device: torch.device, progress: Progress) -> dict[str, Any]:
    entrypoint = plan.job.entrypoint
    if entrypoint:
        result = resolve_entrypoint(entrypoint)(ctx, plan)
        return {"entrypoint": entrypoint, **(result or {})}
    kind = plan.workload.kind
    if plan.model.diffusers_class and kind != "generate":  # the generic path (runtime/model/generic); the planner
        # refused the rest; generate: runtime/pipelines/generic.py
        return run_generic(plan, ctx, device, compile_model=lambda model: _compile(plan, model, device, generic=True))
    if kind == "verify":
        return _verify(plan, ctx, device)
    if kind == "benchmark":
        return _benchmark(plan, ctx, device, progress)
    if kind == "inference":
        return _inference(plan, ctx, device, progress)
    if kind == "generate":
        return run_generate(plan, ctx, device, progress.output_dir, progress=progress,  # compile: the generic path's
                            compile_model=lambda model: _compile(plan, model, device, generic=True))
    if kind == "preflight":
        return run_preflight(ctx, plan)
    raise ValueError(f"unknown workload kind {kind!r} (inference | benchmark | verify | generate | preflight)")


# -- shared -------------------------------------------------------------------------------

def _build(plan: Plan, ctx: ParallelContext | None, device: torch.device):
    """The plan's model: its parameters whole on every rank, or sharded (plan.placement)."""
    wl = plan.workload
    return build_sharded(plan.model, ctx, plan.placement.shard_weights, seed=wl.seed, dtype=resolve_dtype(wl.dtype),
                         device=device, weights=plan.model.weights, cache=ctx.weight_cache if ctx is not None else None,
                         lora=for_expert(plan.model.lora, 0),  # benchmark/verify/inference: transformer only
                         quant=plan.model.quant)


def _compile(plan: Plan, model: torch.nn.Module, device: torch.device, generic: bool = False) -> CompileInfo:
    """``workload.compile``: the model's blocks compiled (sporch.runtime.compile), or why not."""
    off = compile_off_reason(plan.workload.compile, plan.placement.shard_weights, on_gpu=device.type == "cuda")
    return compile_blocks(model, swap_attention=not generic) if off is None else CompileInfo(enabled=False, reason=off)


def _setup(plan: Plan, ctx: ParallelContext, device: torch.device):
    """(model, runner, inputs, grid, compile info): the model built, its blocks compiled
    when ``workload.compile`` says so (sporch.runtime.compile)."""
    grid = plan.sequence.grid
    model = _build(plan, ctx, device)
    info = _compile(plan, model, device)
    runner = ShardedDiT(model, ctx, grid=grid, backend=attention_choice(plan, ctx, device).kernel)
    inputs = make_inputs(model, grid, plan.workload.batch, plan.workload.seed, ctx)
    return model, runner, inputs, grid, info


def _verify(plan: Plan, ctx: ParallelContext, device: torch.device) -> dict[str, Any]:
    """Sharded forward + min(steps, 2) sampling steps against the unsharded model."""
    wl = plan.workload
    model = _build(plan, ctx, device)
    out = verify(model, ctx, grid=plan.sequence.grid, batch=wl.batch, seed=wl.seed,
                 guidance_scale=wl.guidance_scale, steps=min(wl.steps, 2), shift=wl.shift)
    out["kind"] = "verify"
    out["max_abs_err"] = max(out["forward"]["max_abs_err"], out.get("sample", {}).get("max_abs_err", 0.0))
    return out


# -- benchmark ------------------------------------------------------------------------------

_COMM_OPS = ("all_to_all", "alltoall", "send", "recv", "all_gather", "allgather", "all_reduce",
             "allreduce", "broadcast", "barrier", "isend", "irecv", "c10d", "gloo", "nccl")


def _comm_time_ms(step: Callable[[], Any], device: torch.device) -> float | None:
    """Time spent in collectives during one step, from the profiler's host-side events."""
    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if device.type == "cuda" else [])
    try:
        with profile(activities=activities) as prof:
            step()
            sync(device)
    except RuntimeError:
        return None
    total_us = 0.0
    for evt in prof.key_averages():
        name = evt.key.lower()
        if any(op in name for op in _COMM_OPS):
            # self time: a collective wrapper and its inner op are not counted twice.
            total_us += evt.self_device_time_total if device.type == "cuda" else evt.self_cpu_time_total
    return total_us / 1e3


def _benchmark(plan: Plan, ctx: ParallelContext, device: torch.device, progress: Progress) -> dict[str, Any]:
    wl = plan.workload
    warmup, repeat, guidance = wl.warmup, wl.repeat, wl.guidance_scale
    model, runner, inputs, grid, compiled = _setup(plan, ctx, device)
    x_local = runner.shard_latents(inputs.noise)

    last: list[torch.Tensor] = []

    def step() -> None:
        last[:] = [runner.velocity(x_local, 0.5 * NUM_TRAIN_TIMESTEPS, inputs.cond, guidance_scale=guidance,
                                   null_cond=inputs.null_cond, cfg=wl.cfg_enabled)]

    saved = progress.load() or {}
    times: list[float] = list(saved.get("step_ms", []))
    resumed_from = len(times)
    with torch.no_grad():
        if warmup or compiled.enabled:  # the first call compiles: timed apart from the steps
            time_first_call(compiled, step, lambda: sync(device))
        for _ in range(warmup - 1):
            step()
        for i in range(resumed_from, repeat):
            sync(device)
            start = time.perf_counter()
            step()
            sync(device)
            times.append((time.perf_counter() - start) * 1e3)
            progress.step_done(i + 1, {"kind": "benchmark", "step_ms": times, "total": repeat})
        check_output(last[0] if last else None, "benchmark (velocity)")  # timings of NaN are no benchmark
        ctx.comm_stats = CommStats()  # bytes this rank sends during the profiled step
        comm_ms = _comm_time_ms(step, device)
        sent, ctx.comm_stats = ctx.comm_stats, None
    seq_tokens = grid[0] * grid[1] * grid[2] * wl.batch
    median = statistics.median(times) if times else float("nan")
    return {
        "kind": "benchmark",
        **step_summary(times, tokens_per_step=seq_tokens, estimates=plan.estimates,
                       peak_tflops=plan.cluster.gpu.bf16_tflops),
        "compile": compiled.record(median / 1e3 if times else None),
        "comm_ms_per_step": comm_ms,
        "comm_bytes_per_step": sent.total,
        "comm_bytes_by_op": sent.as_dict(),
        "comm_fraction": (comm_ms / median) if comm_ms is not None and times else None,
        "peak_memory_bytes": peak_memory_bytes(device),
        "parameter_bytes_resident": resident_parameter_bytes(model),
        "shard_weights": plan.placement.shard_weights,
        "local_tokens": runner.local_len,
        "parameters": model.num_parameters(),  # a sharded parameter (DTensor) counts whole
        "resumed": resumed_from > 0,
        "resumed_from_step": resumed_from,
    }


# -- inference ------------------------------------------------------------------------------

def _inference(plan: Plan, ctx: ParallelContext, device: torch.device, progress: Progress) -> dict[str, Any]:
    wl = plan.workload
    steps, guidance = wl.steps, wl.guidance_scale
    model, runner, inputs, grid, compiled = _setup(plan, ctx, device)
    sigmas = flow_sigmas(steps, wl.shift, wl.sigmas)

    saved = progress.load() or {}
    start_step = int(saved.get("step", 0))
    x_local = progress.load_shard(start_step) if start_step else None
    if x_local is None:
        start_step = 0
        x_local = runner.shard_latents(inputs.noise).float()
    step_ms: list[float] = list(saved.get("step_ms", []))[:start_step]
    step_cache = make_step_cache(wl.cache, steps, plan.model.preset)

    def velocity(x: torch.Tensor, sigma: float) -> torch.Tensor:
        return runner.velocity(x, sigma * NUM_TRAIN_TIMESTEPS, inputs.cond, guidance_scale=guidance,
                               null_cond=inputs.null_cond, cfg=wl.cfg_enabled, step_cache=step_cache)

    clock = [0.0]

    def after_step(i: int, x: torch.Tensor) -> None:
        sync(device)
        step_ms.append((time.perf_counter() - clock[0]) * 1e3)
        progress.step_done(i + 1, {"kind": "inference", "step_ms": step_ms, "total": steps}, shard=x)
        clock[0] = time.perf_counter()  # the checkpoint's I/O is not step time

    with torch.no_grad():
        sync(device)
        clock[0] = time.perf_counter()
        x_local = euler_sample(velocity, x_local, sigmas, after_step, start=start_step, step_cache=step_cache)
        check_output(x_local, "inference (denoised latents)")  # this rank's shard, before the gather
        latents = runner.gather_latents(x_local, channels=model.cfg.out_dim)
    progress.finish()
    out: dict[str, Any] = {
        "kind": "inference",
        "steps": steps,
        "step_ms": step_ms,
        "latent_shape": list(latents.shape),
        "latent_mean": float(latents.mean()),
        "latent_std": float(latents.std()) if latents.numel() > 1 else 0.0,
        "peak_memory_bytes": peak_memory_bytes(device),
        "compile": compiled.record(),  # the first step's time includes compiling
        "resumed": start_step > 0,
        "resumed_from_step": start_step,
    }
    if step_cache is not None:
        out["step_cache"] = {**step_cache.record(), **agreed_fields(wl.cache, step_cache.skipped, ctx),
                             "steps_computed": len(step_cache.computed),
                             "steps_skipped": len(step_cache.skipped)}
    writer = ctx.sequence_rank == 0 and ctx.cfg_rank == 0
    if writer:
        path = progress.output_dir / f"latents_dp{ctx.dp_rank}.safetensors"
        path.parent.mkdir(parents=True, exist_ok=True)
        from safetensors.torch import save_file

        save_file({"latents": latents.contiguous().cpu()}, str(path))
        out["latents_path"] = str(path)
    return out
