"""The generic path's verify and benchmark workloads from a Plan (``plan.model.diffusers_class``).

The model: ``plan.model.weights`` (a diffusers folder: config.json + safetensors) or, without
weights, the class built from ``plan.model.diffusers_config`` with seeded random weights. Inputs:
the family's ``inputs`` (runtime/model/generic/families) for the plan's token grid, text length and
batch (doubled when CFG is on: both passes as one batch), drawn from ``workload.seed`` identically
on every rank.
"""

from __future__ import annotations

import time
from typing import Any

import torch

from sporch.orchestrator.benchstats import step_summary
from sporch.orchestrator.contract.plan import Plan
from sporch.runtime.measure import peak_memory_bytes, sync
from sporch.runtime.parallel import ParallelContext

from ..finite import check_output
from .build import load_diffusers, random_diffusers, read_config
from .families import family_module
from .runner import GenericSharded, verify_generic

__all__ = ["build_from_plan", "inputs_from_plan", "run_generic"]

_DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}
#: Max relative error that passes, per dtype (as the hand-built path's verify).
TOLERANCE = {"float32": 1e-5, "bfloat16": 2e-2, "float16": 5e-3}


def build_from_plan(plan: Plan, device: torch.device) -> tuple[torch.nn.Module, dict]:
    m, dtype = plan.model, _DTYPES[plan.workload.dtype]
    if m.weights:
        return load_diffusers(m.weights, dtype=dtype, device=device), read_config(m.weights)
    config = dict(m.diffusers_config or {})
    return random_diffusers(m.diffusers_class, config, seed=plan.workload.seed, dtype=dtype).to(device), config


def inputs_from_plan(plan: Plan, config: dict, device: torch.device) -> dict:
    wl = plan.workload
    batch = wl.batch * (2 if wl.cfg_enabled else 1)
    gen = torch.Generator().manual_seed(wl.seed + 1)
    kw = family_module(plan.model.family).inputs(config, batch=batch, grid=plan.sequence.grid,
                                                 text_len=plan.model.text_len, generator=gen,
                                                 dtype=_DTYPES[wl.dtype])
    return {k: (v.to(device) if torch.is_tensor(v) else v) for k, v in kw.items()}


def run_generic(plan: Plan, ctx: ParallelContext, device: torch.device) -> dict[str, Any]:
    model, config = build_from_plan(plan, device)
    inputs = inputs_from_plan(plan, config, device)
    wl = plan.workload
    base = {"family": plan.model.family, "diffusers_class": plan.model.diffusers_class, "path": "generic"}
    if wl.kind == "verify":
        out = verify_generic(model, ctx, inputs, batched=family_module(plan.model.family).BATCHED)
        tol = TOLERANCE[wl.dtype]
        return {"kind": "verify", **base, "forward": out, "max_abs_err": out["max_abs_err"],
                "max_rel_err": out["max_rel_err"], "tolerance": tol, "ok": out["max_rel_err"] <= tol}
    runner = GenericSharded(model, ctx, batched=family_module(plan.model.family).BATCHED)
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
    return {"kind": "benchmark", **base,
            **step_summary(times, tokens_per_step=grid[0] * grid[1] * grid[2] * wl.batch, estimates=plan.estimates,
                           peak_tflops=plan.cluster.gpu.bf16_tflops),
            "parameters": sum(p.numel() for p in model.parameters()), "peak_memory_bytes": peak_memory_bytes(device)}
