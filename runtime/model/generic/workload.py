"""The generic path's verify and benchmark workloads from a Plan (``plan.model.diffusers_class``).

The model: ``plan.model.weights`` (a diffusers folder: config.json + safetensors) or, without
weights, the class built from ``plan.model.diffusers_config`` with seeded random weights. Inputs:
the family's ``inputs`` (runtime/model/generic/families) for the plan's token grid, text length and
batch (doubled when CFG is on: both passes as one batch), drawn from ``workload.seed`` identically
on every rank. The model is built as the plan places it (``placed.py``: LoRA adapters merged,
``model.quant``, parameters sharded per ``parallel.shard_weights``), the attention kernel is
the hand-built path's choice for ``workload.attention_precision`` (``kernel_choice``), and the
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
from sporch.runtime.measure import peak_memory_bytes, sync
from sporch.runtime.parallel import ParallelContext

from ..finite import check_output
from ..shard_weights import resident_parameter_bytes
from .build import read_config
from .families import family_module
from .placed import build_transformer
from .plans import split_plan
from .runner import GenericSharded, verify_generic
from .split import check_recorded_split

__all__ = ["build_from_plan", "inputs_from_plan", "run_generic"]

_DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}
#: Max relative error that passes, per dtype (as the hand-built path's verify).
TOLERANCE = {"float32": 1e-5, "bfloat16": 2e-2, "float16": 5e-3}


def build_from_plan(plan: Plan, device: torch.device, ctx: ParallelContext | None = None) -> tuple[torch.nn.Module, dict]:
    """The plan's diffusers transformer placed as the plan says (generic/placed.py: its LoRA
    adapters merged, ``model.quant``, its parameters sharded over ``ctx`` per
    ``plan.placement.shard_weights``; no ``ctx``: whole)."""
    m = plan.model
    config = read_config(m.weights) if m.weights else dict(m.diffusers_config or {})
    model = build_transformer(weights=m.weights, class_name=m.diffusers_class, config=config, ctx=ctx,
                              shard_weights=plan.placement.shard_weights, quant=m.quant, lora=m.lora,
                              seed=plan.workload.seed, dtype=_DTYPES[plan.workload.dtype], device=device)
    return model, config


def inputs_from_plan(plan: Plan, config: dict, device: torch.device) -> dict:
    wl = plan.workload
    batch = wl.batch * (2 if wl.cfg_enabled else 1)
    gen = torch.Generator().manual_seed(wl.seed + 1)
    kw = family_module(plan.model.family).inputs(config, batch=batch, grid=plan.sequence.grid,
                                                 text_len=plan.model.text_len, generator=gen,
                                                 dtype=_DTYPES[wl.dtype])
    return {k: (v.to(device) if torch.is_tensor(v) else v) for k, v in kw.items()}


def kernel_choice(plan: Plan, ctx: ParallelContext | None, device: torch.device) -> Choice:
    """The attention kernel of ``workload.attention_precision`` here, as the hand-built path
    chooses it (runtime/attention/select.py); the text keys ride in the split sequence on this
    path (no separate joint call to merge), so only the ring's blocks are merged."""
    return run_choice(plan.workload.attention_precision, device, plan.workload.dtype,
                      ring=ctx.ring if ctx is not None else 1)


def run_generic(plan: Plan, ctx: ParallelContext, device: torch.device,
                compile_model: Callable[[torch.nn.Module], Any] | None = None) -> dict[str, Any]:
    """verify / benchmark of the plan. ``compile_model(model)``: compiles the blocks where the
    plan says so (runtime/workloads.py, by the hand-built path's rule) and returns the
    ``CompileInfo`` (``enabled``, ``first_call_s``, ``record()``); None: eager."""
    model, config = build_from_plan(plan, device, ctx)
    check_recorded_split(plan.sequence, split_plan(type(model)), plan.model.diffusers_class)
    inputs = inputs_from_plan(plan, config, device)
    wl = plan.workload
    kernel = kernel_choice(plan, ctx, device)
    batched = family_module(plan.model.family).BATCHED
    base = {"family": plan.model.family, "diffusers_class": plan.model.diffusers_class, "path": "generic",
            "attention_kernel": kernel.kernel, "attention_choice": kernel.reason, "lora_adapters": len(plan.model.lora or []),
            "shard_weights": plan.placement.shard_weights, "quant": plan.model.quant or "none",
            "resident_parameter_bytes": resident_parameter_bytes(model)}
    if wl.kind == "verify":
        compiled: list = []  # the unsharded reference runs eager, then the blocks compile
        out = verify_generic(model, ctx, inputs, backend=kernel.kernel, batched=batched,
                             prepare=lambda: compiled.append(compile_model(model)) if compile_model else None)
        tol = TOLERANCE[wl.dtype]
        return {"kind": "verify", **base, "forward": out, "max_abs_err": out["max_abs_err"],
                "max_rel_err": out["max_rel_err"], "tolerance": tol, "ok": out["max_rel_err"] <= tol,
                "compile": compiled[0].record() if compiled else None}
    info = compile_model(model) if compile_model else None
    runner = GenericSharded(model, ctx, backend=kernel.kernel, batched=batched)
    if info is not None and info.enabled:  # the first call compiles: timed apart from the steps
        sync(device)
        start = time.perf_counter()
        runner.forward(**inputs)
        sync(device)
        info.first_call_s = time.perf_counter() - start
    times = []
    out = None
    for i in range(wl.warmup + wl.repeat):
        sync(device)
        start = time.perf_counter()
        out = runner.forward(**inputs)
        sync(device)
        if i >= wl.warmup:
            times.append((time.perf_counter() - start) * 1e3)
    check_output(out, "benchmark (velocity)")  # timings of NaN are no benchmark
    grid = plan.sequence.grid
    median = statistics.median(times) if times else None
    return {"kind": "benchmark", **base,
            **step_summary(times, tokens_per_step=grid[0] * grid[1] * grid[2] * wl.batch, estimates=plan.estimates,
                           peak_tflops=plan.cluster.gpu.bf16_tflops),
            "compile": info.record(median / 1e3 if median is not None else None) if info is not None else None,
            "parameters": sum(p.numel() for p in model.parameters()), "peak_memory_bytes": peak_memory_bytes(device)}
