"""A job's ``container`` section: its keys checked as the cluster's would be, and the container the
job runs in (the cluster's, with the keys the job gives in their place)."""

from __future__ import annotations

import dataclasses
from typing import Any, Optional

from sporch.orchestrator.config.job_spec import JobContainerSpec, JobSpec
from sporch.orchestrator.contract.sections import ContainerSpec
from sporch.orchestrator.contract.vocab import CONTAINER_RUNTIMES
from sporch.orchestrator.errors import SporchError
from sporch.orchestrator.slurm.container import check_container

#: ``container.runtime`` of a job that runs without its cluster's container.
NO_CONTAINER = "none"


def _given(spec: JobContainerSpec) -> dict[str, Any]:
    return {f.name: getattr(spec, f.name) for f in dataclasses.fields(spec) if getattr(spec, f.name) is not None}


def validate_container(job: JobSpec, source: str, bad) -> None:
    """The keys a job's ``container`` section gives, each checked as the cluster's would be (the
    whole container, the cluster's merged with the job's, is checked again when planning)."""
    if job.container is None:
        return
    given = _given(job.container)
    runtime = given.get("runtime")
    if runtime is not None and runtime not in (*CONTAINER_RUNTIMES, NO_CONTAINER):
        raise bad("container.runtime", f"must be one of {', '.join(CONTAINER_RUNTIMES)} or {NO_CONTAINER} "
                  f"(without the cluster's container), got {runtime!r}")
    if runtime == NO_CONTAINER:
        return
    # the image and runtime may come from the cluster: stand-ins where the job gives none
    check_container(ContainerSpec(**{"runtime": "podman", "image": "image", **given}), source)


def effective_container(cluster_container: Optional[ContainerSpec], job: JobSpec) -> Optional[ContainerSpec]:
    """The container a job runs in: the cluster's, with the keys of the job's ``container``
    section in place of the cluster's (``runtime: none``: no container). A job on a cluster
    without one gives at least ``runtime`` and ``image``."""
    if job.container is None:
        return cluster_container
    given = _given(job.container)
    if given.get("runtime") == NO_CONTAINER:
        return None
    where = job.source or "job"
    if cluster_container is None:
        missing = [k for k in ("runtime", "image") if not given.get(k)]
        if missing:
            raise SporchError(f"{where}: 'container' needs {' and '.join(missing)}: the cluster has no container "
                              "to take them from (docs/clusters.md, \"container\")")
        base = ContainerSpec()
    else:
        base = cluster_container
    given = {k: (list(v) if isinstance(v, (list, tuple)) else dict(v) if isinstance(v, dict) else v)
             for k, v in given.items()}
    return check_container(dataclasses.replace(base, **given), where)
