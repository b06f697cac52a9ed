"""Published scaling measurements (``data/published.yaml``) as plans and observations.

Each case is one machine (one node of N GPUs) running one model and workload under several
layouts; :func:`observations` plans every measured layout with sporch's planner and pairs the
cost model's inputs with the published seconds per generation (a "job"-level observation:
steps x step + fixed costs). :func:`published_seconds` finds the published time of a plan's
own run (a campaign point that repeats a published measurement).
"""

from __future__ import annotations

import functools
from dataclasses import replace
from pathlib import Path
from typing import Any, Mapping, Optional

from sporch.orchestrator.config.cluster import ClusterSpec, GpuSpec, IntraNodeSpec, validate_cluster
from sporch.orchestrator.config.job_checks import validate_job
from sporch.orchestrator.config.job_spec import JobSpec, ModelSpec, ParallelSpec, WorkloadSpec
from sporch.orchestrator.contract.plan import Layout, Plan
from sporch.orchestrator.plan.calibration import Observation
from sporch.orchestrator.plan.cost_constants import gpu_entry
from sporch.orchestrator.plan.cost_inputs import compiles, inputs_from_plan
from sporch.orchestrator.plan.data_tables import read_data_table
from sporch.orchestrator.plan.layouts import compact
from sporch.orchestrator.plan.pipeline_estimate import known_parts
from sporch.orchestrator.plan.planner import make_plan
from sporch.orchestrator.plan.resolve import resolve_model

#: The measurements file: one case per machine, model and workload.
MEASUREMENTS_FILE = Path(__file__).resolve().parent / "data" / "published.yaml"


@functools.lru_cache(maxsize=1)
def cases() -> tuple[dict[str, Any], ...]:
    return tuple(read_data_table(MEASUREMENTS_FILE)["cases"])


def checked_cases() -> tuple[dict[str, Any], ...]:
    """The cases the cost model is held to (tests/plan/test_cost_model.py); a case marked
    ``checked: false`` is kept for the record, with a note saying what the model lacks."""
    return tuple(c for c in cases() if c.get("checked", True))


def case(name: str) -> dict[str, Any]:
    for c in cases():
        if c["name"] == name:
            return c
    raise KeyError(name)


def plan_case(c: dict[str, Any], layout: Layout, constants: dict[str, float] | None = None,
              shard_weights: str = "none") -> Plan:
    """The Plan of ``layout`` for case ``c`` (a one-node cluster of layout.world_size GPUs);
    ``shard_weights``: how the measured run held the DiT's parameters (``none``: whole)."""
    cluster = validate_cluster(ClusterSpec(
        name=c["name"], nodes=1, gpus_per_node=layout.world_size, gpu=GpuSpec(**c["gpu"]),
        intra_node=IntraNodeSpec(**c["intra_node"]), calibration_constants=dict(constants or {}),
    ), c["name"])
    job = JobSpec(name=c["name"], model=ModelSpec(preset=c["model"]),
                  workload=WorkloadSpec(kind="inference", dtype="bfloat16", compile=bool(c["compile"]),
                                        **c["workload"]),
                  parallel=ParallelSpec(**layout.sizes(), shard_weights=shard_weights))
    return make_plan(cluster, validate_job(job, c["name"]))


def layouts(c: dict[str, Any]) -> list[tuple[Layout, float]]:
    return [(Layout(*m["layout"]), float(m["seconds"])) for m in c["measured"]]


def level(c: dict[str, Any]) -> str:
    """"job" (seconds per generation: steps + text encoder + VAE) or "step" (``per: step``)."""
    return "step" if c.get("per") == "step" else "job"


@functools.lru_cache(maxsize=None)
def pipeline_parts(preset: str) -> Optional[Mapping[str, Any]]:
    """The text encoders' and VAE's facts of a family preset (a case's ``parts``: its model is a
    stand-in shape of that preset's transformer, run in that preset's pipeline)."""
    return known_parts(resolve_model(ModelSpec(preset=preset)))


def observations(c: dict[str, Any]) -> list[Observation]:
    """The case's measured layouts as observations; each run's text encoder where the table says it
    ran (``text_encoder: cpu | sharded``, else on the leader's GPU), its pipeline the case's
    ``parts`` preset's (else its model's family's)."""
    parts = pipeline_parts(c["parts"]) if c.get("parts") else None
    out = []
    for m in c["measured"]:
        lay = Layout(*m["layout"])
        x = inputs_from_plan(plan_case(c, lay, shard_weights=m.get("shard_weights", "none")), parts)
        placement = m.get("text_encoder", "leader")
        if placement != "leader" and x.phases is not None:
            degree = lay.ring * lay.ulysses if placement == "sharded" else 1
            x = replace(x, phases=replace(x.phases, encoder_placement=placement, encode_degree=degree))
        out.append(Observation(x, float(m["seconds"]), level(c), compact(lay)))
    return out


def published_seconds(plan: Plan) -> Optional[tuple[str, float]]:
    """(case name, published seconds per generation) of a published case measured under
    ``plan``'s layout with its preset, workload shape, steps, guidance and compile setting on
    a GPU of the same row of the cost model's table; None when no case matches (a ``per: step``
    case gives no time per generation)."""
    if not plan.model.preset:
        return None
    w, lay = plan.workload, plan.layout
    gpu = gpu_entry(plan.cluster.gpu.model or "")["name"]
    for c in cases():
        cw = c["workload"]
        if (level(c) != "job" or c["model"] != plan.model.preset or gpu_entry(c["gpu"]["model"])["name"] != gpu
                or bool(c["compile"]) != compiles(plan) or int(cw["steps"]) != w.steps
                or (cw.get("frames", 1), cw["height"], cw["width"]) != (w.frames or 1, w.height, w.width)
                or float(cw.get("guidance_scale", 1.0)) != float(w.guidance_scale)):
            continue
        for measured, seconds in layouts(c):
            if measured == Layout(lay.dp, lay.cfg, lay.ring, lay.ulysses):  # a plan's layout as the table's
                return c["name"], seconds
    return None
