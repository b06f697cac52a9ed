"""What a rank runs: the job's own entrypoint, or the built-in DiT workloads.

- ``entrypoint: "pkg.module:function"`` in job.yaml: ``function(ctx, plan)`` is called on
  every rank with the ParallelContext and the Plan (``plan.job`` is the resolved job config,
  ``plan.model`` / ``plan.workload`` / ``plan.sequence`` the rest). It may return a dict of
  JSON-able metrics.
Every model is its family's diffusers class run sequence-parallel (runtime/models):

- ``inference``: the flow-matching Euler loop on the family's random inputs; progress (the
  latents) is saved after every step, so a requeued job resumes from its last finished step.
- ``benchmark``: ``warmup`` untimed + ``repeat`` timed denoising steps (one model
  evaluation with CFG each); per-step latency, tokens/s, peak memory.
- ``generate``: prompts -> the family's diffusers pipeline around the sharded transformer ->
  one MP4/PNG per prompt (runtime/pipelines/, docs/generate.md).
- ``verify``: the sharded forward and a short sampling run against the unsharded model
  (computed on every rank from the same seeded inputs); max error against the tolerance.
"""

from __future__ import annotations

import importlib
from typing import Any, Callable

import torch

from sporch.orchestrator.contract.plan import Plan
from sporch.orchestrator.contract.sections import compile_off_reason
from sporch.runtime.compile import CompileInfo, compile_blocks
from sporch.runtime.parallel import ParallelContext
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


def run_workload(plan: Plan, ctx: ParallelContext, device: torch.device, progress: Progress) -> dict[str, Any]:
    result = _run_workload(plan, ctx, device, progress)
    if plan.workload.attention_precision != "exact" and not plan.job.entrypoint:
        from sporch.runtime.models.workload import kernel_choice

        choice = kernel_choice(plan, ctx, device)
        result.setdefault("attention_kernel", choice.kernel)
        result.setdefault("attention_choice", choice.reason)
    return result


def _run_workload(plan: Plan, ctx: ParallelContext, device: torch.device, progress: Progress) -> dict[str, Any]:
    entrypoint = plan.job.entrypoint
    if entrypoint:
        result = resolve_entrypoint(entrypoint)(ctx, plan)
        return {"entrypoint": entrypoint, **(result or {})}
    kind = plan.workload.kind
    compile_model = lambda model: _compile(plan, model, device)  # noqa: E731
    # The model workloads import torch._dynamo (about 1.4 s of CPU of a rank's start) and then
    # diffusers: paid only by the ranks that run a model, not by a preflight or an entrypoint.
    if kind in ("verify", "benchmark", "inference"):
        from sporch.runtime.models.workload import run_model

        return run_model(plan, ctx, device, progress, compile_model=compile_model)
    if kind == "generate":
        from sporch.runtime.pipelines.generate import run_generate

        return run_generate(plan, ctx, device, progress.output_dir, progress=progress, compile_model=compile_model)
    if kind == "preflight":
        return run_preflight(ctx, plan)
    raise ValueError(f"unknown workload kind {kind!r} (inference | benchmark | verify | generate | preflight)")


def _compile(plan: Plan, model: torch.nn.Module, device: torch.device) -> CompileInfo:
    """``workload.compile``: the model's blocks compiled (sporch.runtime.compile), or why not."""
    off = compile_off_reason(plan.workload.compile, plan.placement.shard_weights, on_gpu=device.type == "cuda")
    return compile_blocks(model) if off is None else CompileInfo(enabled=False, reason=off)
