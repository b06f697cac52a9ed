"""Where a job that fits nowhere here would fit: the smallest cluster among those given.

Pure: the caller lists the clusters (the descriptors it knows); each is planned with the job's
parallel dims left to their defaults and its node count unset (the whole cluster), parameters
sharded when that is what it takes (``parallel.shard_weights: auto``). The smallest is the
one with the fewest GPUs that fits, then the least memory used.
"""

from __future__ import annotations

import dataclasses
from typing import Iterable, Optional

from sporch.orchestrator.config.job_spec import JobSpec, ParallelSpec, ResourcesSpec
from sporch.orchestrator.contract.plan import Plan
from sporch.orchestrator.contract.sections import ClusterSpec
from sporch.orchestrator.errors import SporchError
from sporch.orchestrator.plan.planner import make_plan


def smallest_fit(job: JobSpec, clusters: Iterable[ClusterSpec]) -> Optional[Plan]:
    """The plan of ``job`` on the smallest of ``clusters`` it fits, or None."""
    free = dataclasses.replace(job, parallel=ParallelSpec(shard_weights="auto"),
                               resources=ResourcesSpec(time=job.resources.time))
    fits = []
    for cluster in clusters:
        try:
            plan = make_plan(cluster, free, tables=False)
        except SporchError:
            continue  # the job cannot be laid out there at all (heads, batch, world size)
        if plan.estimates.memory.fits:
            fits.append(plan)
    if not fits:
        return None
    return min(fits, key=lambda p: (p.world_size, p.estimates.memory.memory_fraction, p.cluster.name))


def fit_line(plan: Optional[Plan]) -> str:
    """One line naming where the job fits (or that no known cluster does)."""
    if plan is None:
        return ("no known cluster fits this job, even with its parameters sharded over every rank: use a smaller "
                "model, shape or batch, workload.dtype=bfloat16, or a descriptor of a bigger cluster")
    c, p = plan.cluster, plan.placement
    weights = "" if p.shard_degree <= 1 else f", parameters sharded over {p.shard_degree} ranks"
    return (f"the smallest known cluster that fits: {c.name} ({plan.nodes} x {c.gpus_per_node} {c.gpu.model}, "
            f"{plan.estimates.memory.memory_gib_per_gpu:.1f} of {c.gpu.memory_gib:g} GiB per GPU{weights})")
