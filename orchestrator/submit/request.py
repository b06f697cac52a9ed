"""A SubmitRequest: everything a backend needs to submit, computed without side effects.

TorchX-style: ``build_request`` is pure (the clock is a parameter): ``submit --dry-run`` prints
the request and writes nothing.
"""

from __future__ import annotations

import datetime as _dt
import posixpath
from dataclasses import dataclass
from pathlib import Path
from typing import Optional

from sporch.orchestrator.config.cluster import ClusterSpec
from sporch.orchestrator.config.job_spec import JobSpec
from sporch.orchestrator.contract.job_files import PLAN_FILE, SCRIPT_FILE
from sporch.orchestrator.plan.planner import make_plan
from sporch.orchestrator.contract.plan import Plan
from sporch.orchestrator.submit.render import render_job
from sporch.orchestrator.submit.slurm_job import SlurmJob


@dataclass(frozen=True)
class SubmitRequest:
    cluster: str
    plan: Plan
    job: SlurmJob  # the job's files (job.files) and Slurm request, built from the Plan
    script: str  # the rendered batch script
    destination: str  # human-readable: where and how it would be submitted
    remote: bool  # True when submission goes through the cluster's login host (ssh)

    @property
    def job_dir(self) -> str:
        """Where the job's files go on the cluster."""
        return self.job.files.job_dir

    def files(self) -> dict[str, str]:
        """Relative path -> content of the files a backend writes into ``job_dir``."""
        return {PLAN_FILE: self.plan.to_json(), SCRIPT_FILE: self.script}

    @property
    def script_path(self) -> str:
        return self.job.files.script

    @property
    def plan_path(self) -> str:
        return self.job.files.plan

    def sbatch_command(self) -> str:
        return f"sbatch --parsable {self.script_path}"


def default_job_dir(cluster: ClusterSpec, job: JobSpec, now: _dt.datetime) -> str:
    """``<output_dir>/<name>/<YYYYmmdd-HHMMSS>``; a relative output_dir is taken from the
    login workdir (remote) or the current directory (local)."""
    stamp = now.strftime("%Y%m%d-%H%M%S")
    out = job.output_dir
    if cluster.login is not None and not out.startswith(("/", "~")):
        out = posixpath.join(cluster.login.workdir, out)
    elif not out.startswith(("/", "~")):
        out = str(Path.cwd() / out)
    return posixpath.join(out, job.name, stamp)


def destination_text(cluster: ClusterSpec) -> str:
    part = f" (partition {cluster.slurm.partition})" if cluster.slurm.partition else ""
    if cluster.login is None:
        return f"sbatch on this machine{part}"
    lg = cluster.login
    who = f"{lg.user}@{lg.host}" if lg.user else lg.host
    port = f":{lg.port}" if lg.port else ""
    jump = [h for h in (lg.proxy_jump or []) if h != "none"]
    via = f" via {','.join(jump)}" if jump else ""
    return f"sbatch over ssh on {who}{port}{via}{part}"


def build_request(
    cluster: ClusterSpec,
    job: JobSpec,
    *,
    job_dir: Optional[str] = None,
    now: Optional[_dt.datetime] = None,
    plan: Optional[Plan] = None,
) -> SubmitRequest:
    """``plan``: the Plan of (cluster, job) when the caller has already made it."""
    plan = plan if plan is not None else make_plan(cluster, job)
    jd = job_dir or default_job_dir(cluster, job, now or _dt.datetime.now())
    slurm_job = SlurmJob.from_plan(plan, jd)
    return SubmitRequest(
        cluster=cluster.name,
        plan=plan,
        job=slurm_job,
        script=render_job(slurm_job),
        destination=destination_text(cluster),
        remote=cluster.login is not None,
    )
