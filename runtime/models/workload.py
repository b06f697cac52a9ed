"""The verify, benchmark and inference workloads from a Plan: the model's diffusers class
(``plan.model.diffusers_class``) run sequence-parallel.

The model: ``plan.model.weights`` (a diffusers folder: config.json + safetensors) or, without
weights, the class built from ``plan.model.diffusers_config`` with seeded random weights. Inputs:
the family's ``inputs`` (runtime/models/families) for the plan's token grid, text length and
batch (doubled when CFG is on: both passes as one batch), drawn from ``workload.seed`` identically
on every rank. The model is built as the plan places it (``placed.py``: LoRA adapters merged,
``model.quant``, parameters sharded per ``parallel.shard_weights``), the attention kernel is
chosen for ``workload.attention_precision`` (``kernel_choice``), and the
blocks are compiled where ``workload.compile`` says so (the caller's ``compile_model``:
runtime/workloads.py, since compiling sits above the model layer).
"""

from __future__ import annotations

import statistics
import time
from typing import Any, Callable

import torch

from sporch.orchestrator.benchstats import step_summary
from sporch.orchestrator.contract.plan import Plan
from sporch.runtime.attention.select import Choice, run_choice
from sporch.runtime.attention.comm_stats import CommStats
from sporch.runtime.measure import collective_ms, peak_memory_bytes, sync
from sporch.runtime.parallel import ParallelContext, replica_rows

from sporch.runtime.models.dtypes import DTYPES as _DTYPES
from sporch.runtime.models.finite import check_output
from sporch.runtime.models.shard_weights import resident_parameter_bytes
from sporch.orchestrator.models.lora_experts import for_expert

from sporch.runtime.models.weight_cache import cache_key
from sporch.runtime.models.build import from_state, read_config
from sporch.runtime.models.cache.apply import apply_step_cache
from sporch.runtime.models.cache.record import inference_step_cache
from sporch.runtime.models.families import family_module
from sporch.runtime.models.inference import (denoise, flow_sigmas, replica_inputs, run_inference, sampling_form,
                                               timestep_scale)
from sporch.runtime.models.placed import build_transformer
from sporch.runtime.models.split_plans import split_plan
from sporch.runtime.models.runner import ShardedTransformer, verify_model
from sporch.runtime.models.sequence_split import check_recorded_split

__all__ = ["build_from_plan", "inputs_from_plan", "run_model"]
#: Max relative error that passes, per dtype (float32: rounding; the half types: their precision).
TOLERANCE = {"float32": 1e-5, "bfloat16": 2e-2, "float16": 5e-3}


def build_from_plan(plan: Plan, device: torch.device, ctx: ParallelContext | None = None) -> tuple[torch.nn.Module, dict]:
    """The plan's diffusers transformer placed as the plan says (models/placed.py: its LoRA
    adapters merged, ``model.quant``, its parameters sharded over ``ctx`` per
    ``plan.placement.shard_weights``; no ``ctx``: whole). The points of a pack (``ctx.weight_cache``)
    that share a whole model take its parameters from the cache: loaded or drawn once."""
    m = plan.model
    config = read_config(m.weights, m.diffusers_config) if m.weights else dict(m.diffusers_config or {})
    dtype = _DTYPES[plan.workload.dtype]
    lora = for_expert(m.lora, 0)  # verify / benchmark / inference: the transformer (Wan2.2: the high-noise expert)

    def build() -> torch.nn.Module:
        return build_transformer(weights=m.weights, class_name=m.diffusers_class, config=config, ctx=ctx,
                                 shard_weights=plan.placement.shard_weights, quant=m.quant, lora=lora,
                                 seed=plan.workload.seed, dtype=dtype, device=device)

    cache = getattr(ctx, "weight_cache", None) if ctx is not None else None
    if cache is None or plan.placement.shard_weights != "none" or (m.quant or "none") != "none":
        return build(), config
    key = cache_key(config, weights=m.weights, seed=plan.workload.seed, dtype=dtype, device=torch.device(device),
                    lora=lora)
    return from_state(m.diffusers_class, config, cache.parameters(key, build), dtype), config


def inputs_from_plan(plan: Plan, config: dict, device: torch.device) -> dict:
    wl = plan.workload
    batch = wl.batch * (2 if wl.cfg_enabled else 1)
    gen = torch.Generator().manual_seed(wl.seed + 1)
    kw = family_module(plan.model.family).inputs(config, batch=batch, grid=plan.sequence.grid,
                                                 text_len=plan.model.text_len, generator=gen,
                                                 dtype=_DTYPES[wl.dtype])
    return {k: (v.to(device) if torch.is_tensor(v) else v) for k, v in kw.items()}


def kernel_choice(plan: Plan, ctx: ParallelContext | None, device: torch.device) -> Choice:
    """The attention kernel of ``workload.attention_precision`` here
    (runtime/attention/select.py); the text keys ride in the split sequence on this
    path (no separate joint call to merge), so only the ring's blocks are merged."""
    return run_choice(plan.workload.attention_precision, device, plan.workload.dtype,
                      ring=ctx.ring if ctx is not None else 1)


def run_model(plan: Plan, ctx: ParallelContext, device: torch.device, progress: Any = None,
                compile_model: Callable[[torch.nn.Module], Any] | None = None) -> dict[str, Any]:
    """verify / benchmark / inference of the plan. ``compile_model(model)``: compiles the blocks
    where the plan says so (runtime/workloads.py) and returns the ``CompileInfo`` (``enabled``,
    ``first_call_s``, ``record()``); None: eager. ``progress``: inference's step files and the
    USR2 stop (:class:`~sporch.runtime.progress.Progress`)."""
    model, config = build_from_plan(plan, device, ctx)
    check_recorded_split(plan.sequence, split_plan(type(model)), plan.model.diffusers_class)
    inputs = inputs_from_plan(plan, config, device)
    wl = plan.workload
    kernel = kernel_choice(plan, ctx, device)
    batched = family_module(plan.model.family).BATCHED
    base = {"family": plan.model.family, "diffusers_class": plan.model.diffusers_class, "path": "diffusers",
            "attention_kernel": kernel.kernel, "attention_choice": kernel.reason, "lora_adapters": len(plan.model.lora or []),
            "shard_weights": plan.placement.shard_weights, "quant": plan.model.quant or "none",
            "resident_parameter_bytes": resident_parameter_bytes(model)}
    if wl.kind == "verify":
        return {**base, **_verify(plan, ctx, model, config, inputs, kernel.kernel, batched, compile_model)}
    if wl.kind == "inference":
        return {**base, **_inference(plan, ctx, device, progress, model, config, inputs, kernel.kernel, batched,
                                     compile_model)}
    info = compile_model(model) if compile_model else None
    runner = ShardedTransformer(model, ctx, backend=kernel.kernel, batched=batched)
    if info is not None and info.enabled:  # the first call compiles: timed apart from the steps
        sync(device)
        start = time.perf_counter()
        runner.forward(**inputs)
        sync(device)
        info.first_call_s = time.perf_counter() - start
    # the timed steps a requeued run already finished are kept (progress.json): it times the rest
    saved = (progress.load() or {}) if progress is not None else {}
    times: list[float] = list(saved.get("step_ms", [])) if saved.get("kind") == "benchmark" else []
    resumed_from = len(times)
    out = None
    for i in range(wl.warmup + len(times) if times else 0, wl.warmup + wl.repeat):  # warm-up: on a first run
        sync(device)
        start = time.perf_counter()
        out = runner.forward(**inputs)
        sync(device)
        if i >= wl.warmup:
            times.append((time.perf_counter() - start) * 1e3)
            if progress is not None:  # rank 0 prints `sporch: step k/n`; a USR2 stops here, agreed
                progress.step_done(len(times), {"kind": "benchmark", "step_ms": times, "total": wl.repeat})
    if out is None:  # every timed step was done before the requeue: one forward for the output check
        out = runner.forward(**inputs)
    check_output(out, "benchmark (velocity)")  # timings of NaN are no benchmark
    ctx.comm_stats = CommStats()  # the bytes this rank sends in one profiled step, and their time
    comm_ms = collective_ms(lambda: runner.forward(**inputs), device)
    sent, ctx.comm_stats = ctx.comm_stats, None
    grid = plan.sequence.grid
    median = statistics.median(times) if times else None
    return {"kind": "benchmark", **base,
            **step_summary(times, tokens_per_step=grid[0] * grid[1] * grid[2] * wl.batch, estimates=plan.estimates,
                           peak_tflops=plan.cluster.gpu.bf16_tflops),
            "compile": info.record(median / 1e3 if median is not None else None) if info is not None else None,
            "comm_ms_per_step": comm_ms, "comm_bytes_per_step": sent.total, "comm_bytes_by_op": sent.as_dict(),
            "comm_fraction": comm_ms / median if comm_ms is not None and median else None,
            "resumed": resumed_from > 0, "resumed_from_step": resumed_from,
            "parameters": sum(p.numel() for p in model.parameters()), "peak_memory_bytes": peak_memory_bytes(device)}


#: Sampling steps verify runs besides the forward (the loop's error grows with them; two show it).
VERIFY_STEPS = 2


def _verify(plan: Plan, ctx: ParallelContext, model: torch.nn.Module, config: dict, inputs: dict, backend: str,
            batched: tuple, compile_model: Callable[[torch.nn.Module], Any] | None) -> dict[str, Any]:
    """The sharded forward and ``min(steps, 2)`` sampling steps against the unsharded model, from
    the same inputs on every rank: the errors and whether they are within the dtype's tolerance."""
    wl = plan.workload
    compiled: list = []  # the unsharded reference runs eager, then the blocks compile
    out = verify_model(model, ctx, inputs, backend=backend, batched=batched,
                         prepare=lambda: compiled.append(compile_model(model)) if compile_model else None)
    steps = min(wl.steps, VERIFY_STEPS)
    sigmas = flow_sigmas(steps, wl.shift, wl.sigmas[:steps] if wl.sigmas else None)
    runner = ShardedTransformer(model, ctx, backend=backend, batched=batched)
    loop = dict(scale=timestep_scale(plan.model.family), cfg=wl.cfg_enabled, guidance_scale=wl.guidance_scale,
                out_channels=int(config.get("out_channels") or config["in_channels"]))
    with torch.no_grad():
        loop_inputs, whole = sampling_form(plan.model.family, inputs, lambda **kw: _first(model(**kw)))
        ref = denoise(whole, loop_inputs, sigmas, **loop)
        got = denoise(sampling_form(plan.model.family, inputs, runner.forward)[1], loop_inputs, sigmas, **loop)
    check_output(ref, "verify (unsharded sampling)")
    check_output(got, "verify (sharded sampling)")
    err = float((got - ref).abs().max())
    sample = {"max_abs_err": err, "max_rel_err": err / max(float(ref.abs().max()), 1e-30), "steps": steps}
    tol = TOLERANCE[wl.dtype]
    worst = max(out["max_rel_err"], sample["max_rel_err"])
    return {"kind": "verify", "forward": out, "sample": sample, "steps": steps,
            "max_abs_err": max(out["max_abs_err"], sample["max_abs_err"]), "max_rel_err": worst, "tolerance": tol,
            "ok": worst <= tol, "compile": compiled[0].record() if compiled else None}


def _first(out):
    return out[0] if isinstance(out, (tuple, list)) else getattr(out, "sample", out)


def _inference(plan: Plan, ctx: ParallelContext, device: torch.device, progress: Any, model: torch.nn.Module,
               config: dict, inputs: dict, backend: str, batched: tuple,
               compile_model: Callable[[torch.nn.Module], Any] | None) -> dict[str, Any]:
    """The flow-matching Euler loop on this replica's rows (models/inference.py), its blocks
    compiled where the plan says, ``workload.cache`` applied; the leader of each replica writes
    the latents (``latents_dp<R>.safetensors``)."""
    wl = plan.workload
    info = compile_model(model) if compile_model else None
    mine = replica_inputs(inputs, batched, replica_rows(wl.batch, ctx), wl.batch, wl.cfg_enabled)
    hook = apply_step_cache(model, wl.cache, ctx, num_steps=wl.steps)
    runner = ShardedTransformer(model, ctx, backend=backend, batched=batched)
    out = run_inference(plan, ctx, device, progress, model, config, mine, runner)
    latents = out.pop("latents")
    check_output(latents, "inference (denoised latents)")
    out["compile"] = info.record() if info is not None else None
    if hook is not None:
        out["step_cache"] = inference_step_cache(wl.cache, {name: rec.record() for name, rec in hook.records.items()},
                                                 ctx)
    if ctx.sequence_rank == 0 and ctx.cfg_rank == 0:
        from safetensors.torch import save_file

        path = progress.output_dir / f"latents_dp{ctx.dp_rank}.safetensors"
        path.parent.mkdir(parents=True, exist_ok=True)
        save_file({"latents": latents.contiguous().cpu()}, str(path))
        out["latents_path"] = str(path)
    return out
