"""The harness test_generate_skyreels_v2.py, test_generate_z_image.py and
test_generate_image_families.py share: a tiny pipeline folder's generate plan on a 4-GPU local
node, and several such plans run in one world of 4 gloo ranks, each case recording the leader's
frames, the transformer calls' batch rows and the passes through its first block (a call computed
on the other cfg rank runs none on this one)."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import torch

from sporch.orchestrator.config.cluster import find_cluster
from sporch.orchestrator.config.job import job_from_dict
from sporch.orchestrator.plan.planner import make_plan


def plan_for(folder: Path, workload: dict, parallel: dict):
    """The generate plan of ``folder`` (``model.weights``) with ``workload`` on ``parallel`` (cfg 1 unless given)."""
    job = job_from_dict({"name": "g", "model": {"weights": str(folder)}, "workload": workload,
                         "parallel": {"cfg": 1, **parallel}})
    return make_plan(dataclasses.replace(find_cluster("local"), gpus_per_node=4), job)


def _rows(args: tuple, kw: dict, latents: str) -> int:
    """The batch rows of one transformer call: ``hidden_states``' first dimension, or (``latents="list"``,
    ZImagePipeline's) the length of the latents list passed positionally (one entry per row)."""
    if latents == "list":
        return len(args[0] if args else kw["x"])
    return int(kw["hidden_states"].shape[0])


def world(cases, blocks: tuple[str, ...], latents: str = "hidden_states"):
    """Each case (name, plan JSON, output folder) generated on these ranks; ``blocks``: the
    transformer's attributes that may hold its blocks (the first it has counts the passes)."""
    from sporch.orchestrator.contract.plan import Plan
    from sporch.runtime.parallel import ParallelContext
    from sporch.runtime.pipelines.generate import run_generate

    out = {}
    for name, plan_json, folder in cases:
        plan = Plan.from_json(plan_json)
        ctx = ParallelContext.from_plan(plan)
        frames, rows, passes = {}, [], []

        def attach(model):
            model.register_forward_pre_hook(lambda m, args, kw: rows.append(_rows(args, kw, latents)), with_kwargs=True)
            first = next(getattr(model, b) for b in blocks if hasattr(model, b))[0]
            first.register_forward_pre_hook(lambda m, args: passes.append(1))

        metrics = run_generate(plan, ctx, torch.device("cpu"), Path(folder),
                               frames_sink=lambda i, f: frames.__setitem__(i, f), compile_model=attach)
        out[name] = {**metrics, "frames": frames, "rows": rows, "passes": len(passes)}
        ctx.close()
    return out


def run_four_ranks(folder: Path, workload: dict, cases: dict[str, dict], root: Path, first_block: str,
                   latents: str = "hidden_states") -> list[dict]:
    """Each of ``cases`` (name -> parallel section) planned and generated on the same 4 gloo ranks,
    outputs in ``root/<name>``; per rank, name -> the case's metrics, ``frames``, ``rows``, ``passes``.
    ``first_block``: the transformer's attribute holding its blocks."""
    from sporch.runtime.testing import run_distributed

    tasks = []
    for name, parallel in cases.items():
        (root / name).mkdir()
        tasks.append((name, plan_for(folder, workload, parallel).to_json(), str(root / name)))
    return run_distributed(world, 4, tasks, (first_block,), latents, timeout=900)
