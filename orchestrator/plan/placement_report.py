"""The memory per GPU a checkpoint needs under each placement option (``sporch inspect``).

For each GPU count, a generate job of the checkpoint (a standard workload: Wan 81 frames at
480 x 832 with CFG, Flux 1024 x 1024) on the cluster is planned with its placement pinned: the
plain placement, then each option alone (``parallel.shard_weights=world``; ``pipeline.text_encoder``
sharded or cpu and ``pipeline.vae`` parallel or tiled where the family's encoder and VAE sizes are
known; ``pipeline.experts=offload`` for two experts), then all the saving options at once. The
figures are the planner's own estimate (``plan.estimates.memory``: ``memory_gib_per_gpu`` and ``fits``), the
numbers ``sporch plan`` chooses the placement by. The sequence runs over every GPU (Ulysses as far
as the heads divide, ring for the rest); a count that is neither a part of one node nor whole
nodes of the cluster is skipped.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Optional, Sequence

from sporch.orchestrator.config.job import job_from_dict
from sporch.orchestrator.config.job_spec import ModelSpec
from sporch.orchestrator.contract.sections import ClusterSpec
from sporch.orchestrator.errors import SporchError
from sporch.orchestrator.plan.layouts import divisors
from sporch.orchestrator.plan.pipeline_estimate import known_parts
from sporch.orchestrator.plan.placement import PLAIN
from sporch.orchestrator.plan.planner import make_plan
from sporch.orchestrator.models.families import get_family
from sporch.orchestrator.plan.resolve import resolve_model

#: The workload the memory is estimated for, by attention kind (Wan: cross, Flux: joint).
WORKLOADS: dict[str, dict[str, Any]] = {
    "cross": {"frames": 81, "height": 480, "width": 832, "guidance_scale": 5.0},
    "joint": {"frames": 1, "height": 1024, "width": 1024, "guidance_scale": 3.5},
}


def options(pipeline_known: bool, two_experts: bool) -> list[tuple[str, dict[str, str]]]:
    """(label, settings) of each row: plain, every option alone, all the saving ones."""
    rows = [("plain", {}), ("shard_weights=world", {"shard_weights": "world"})]
    if pipeline_known:
        rows += [("text_encoder=sharded", {"text_encoder": "sharded"}), ("text_encoder=cpu", {"text_encoder": "cpu"}),
                 ("vae=parallel", {"vae": "parallel"}), ("vae=tiled", {"vae": "tiled"})]
    if two_experts:
        rows.append(("experts=offload", {"experts": "offload"}))
    least = {"shard_weights": "world", **({"text_encoder": "cpu", "vae": "tiled"} if pipeline_known else {}),
             **({"experts": "offload"} if two_experts else {})}
    if len(least) > 1:
        rows.append(("all of these", least))
    return [(label, {**PLAIN, **settings}) for label, settings in rows]


def ulysses_for(n: int, heads: int) -> int:
    return max(u for u in divisors(n) if heads % u == 0)


def placement_memory(weights: str, cluster: ClusterSpec, gpus: Sequence[int],
                     preset: Optional[str] = None) -> dict[str, Any]:
    """``{cluster, gpu_memory_gib, workload, gpus, rows: [{option, settings, per_gpu: {n: {gib, fits}}}]}``
    for the checkpoint at ``weights`` (``preset``: the published preset it matches, whose text
    encoder and VAE sizes the planner knows)."""
    model = {"weights": weights, **({"preset": preset} if preset else {})}
    m = resolve_model(ModelSpec(**model))
    if m.attention not in WORKLOADS:
        raise SporchError(f"no standard workload for attention {m.attention!r}")
    # a family with a generate pipeline whose parts' sizes are known: a generate job's placements; else a
    # benchmark (its text encoder and VAE sizes unknown), which places no text encoder or VAE
    generate = bool(get_family(m.family).pipeline_class) and known_parts(m) is not None
    if generate:
        workload = {"kind": "generate", "prompt": "inspect", "dtype": "bfloat16", **WORKLOADS[m.attention]}
    else:
        workload = {"kind": "benchmark", "dtype": "bfloat16", **WORKLOADS[m.attention], "guidance_scale": 1.0}
    two = m.experts > 1
    rows = options(generate, two)
    if not generate:
        rows = [r for r in rows if r[0] in ("plain", "shard_weights=world")]
    gpn = cluster.gpus_per_node
    usable = [n for n in gpus if n <= cluster.nodes * gpn and (n <= gpn or n % gpn == 0)]
    out_rows = [{"option": label, "settings": {k: v for k, v in s.items() if two or k != "experts"}, "per_gpu": {}}
                for label, s in rows]
    for n in usable:
        u = ulysses_for(n, m.num_heads)
        # fewer GPUs than a node has: a node of n GPUs (the same GPU and links)
        where = dataclasses.replace(cluster, gpus_per_node=n, nodes=1) if n < gpn else cluster
        for row, (_, settings) in zip(out_rows, rows):
            job = {"name": "inspect", "model": model, "workload": workload,
                   "parallel": {"ulysses": u, "ring": n // u, "cfg": 1, "dp": 1,
                                "shard_weights": settings["shard_weights"] if n > 1 else "none"},
                   "pipeline": {"text_encoder": settings["text_encoder"] if n > 1 or settings["text_encoder"] != "sharded"
                                else "leader",
                                "vae": settings["vae"] if n > 1 or settings["vae"] != "parallel" else "leader",
                                **({"experts": settings["experts"]} if two else {})},
                   "resources": {"nodes": max(1, n // gpn)}}
            if not generate:
                job.pop("pipeline")
            mem = make_plan(where, job_from_dict(job, "<inspect>"), tables=False).estimates.memory
            row["per_gpu"][n] = {"gib": mem.memory_gib_per_gpu, "fits": bool(mem.fits)}
    return {"cluster": cluster.name, "gpu_memory_gib": cluster.gpu.memory_gib,
            "workload": {k: v for k, v in workload.items() if k != "prompt"}, "gpus": usable,
            "skipped_gpus": [n for n in gpus if n not in usable], "rows": out_rows}
