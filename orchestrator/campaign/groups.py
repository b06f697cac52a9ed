"""Points grouped by identical Slurm resources: one job array per group.

Two points share a group when every line of their batch script header would be the same:
cluster, nodes, GPUs per node, time limit and the cluster's Slurm options (partition,
account, qos, constraint, CPUs per task, memory, exclusive, GPU directive, extra lines).
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field
from typing import Any

#: The cluster's Slurm options that go into the batch header.
SLURM_KEYS = ("partition", "account", "qos", "constraint", "cpus_per_task", "mem", "exclusive", "gpu_directive",
              "extra")


def resource_shape(plan) -> dict[str, Any]:
    """What a point (its Plan) asks Slurm for, and the container its ranks run in (one array
    script serves a group: points in different containers are in different groups; the key is
    left out without a container, so the groups of container-less campaigns keep their names)."""
    slurm = plan.cluster.slurm
    shape = {
        "cluster": plan.cluster.name,
        "nodes": plan.nodes,
        "gpus_per_node": plan.gpus_per_node,
        "time": plan.job.time or slurm.time,
        **{k: getattr(slurm, k) for k in SLURM_KEYS},
    }
    container = getattr(plan.cluster, "container", None)
    if container is not None:
        shape["container"] = container.to_dict()
    return shape


def group_key(shape: dict[str, Any]) -> str:
    """``<cluster>-n<nodes>x<gpus>-<hash6>``: readable, unique per shape, safe as a file name."""
    digest = hashlib.sha256(json.dumps(shape, sort_keys=True, default=str).encode()).hexdigest()[:6]
    return f"{shape['cluster']}-n{shape['nodes']}x{shape['gpus_per_node']}-{digest}"


@dataclass
class Group:
    key: str
    shape: dict
    points: list = field(default_factory=list)  # list[expand.Point], in matrix order


def group_points(points) -> list[Group]:
    """Groups in order of first appearance; points keep their matrix order inside a group."""
    groups: dict[str, Group] = {}
    # the points of one job share its cluster section (planner.PlanBasis): its shape is made once
    # per cluster section, node count and time limit (the plans are alive: their ids are theirs)
    shapes: dict[tuple, tuple[str, dict]] = {}
    for p in points:
        memo = (id(p.plan.cluster), p.plan.nodes, p.plan.gpus_per_node, p.plan.job.time)
        if memo not in shapes:
            shape = resource_shape(p.plan)
            shapes[memo] = (group_key(shape), shape)
        key, shape = shapes[memo]
        if key not in groups:
            groups[key] = Group(key=key, shape=shape)
        groups[key].points.append(p)
    return list(groups.values())
