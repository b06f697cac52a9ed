"""Submit a request: job dir, backend, record -- all or nothing.

1. the job dir is claimed (created; a ``-2``, ``-3``... suffix when that second is taken);
2. ``plan.json``, ``job.sbatch`` and ``logs/`` are written into it;
3. the backend submits;
4. the record is written (``$SPORCH_HOME/jobs/<id>.json`` and ``<job_dir>/record.json``).

When Slurm rejects the job (or anything else fails) the job dir is removed and no record is
written; when writing the record fails after Slurm accepted the job, the job is cancelled.

Every step goes through one :class:`~sporch.orchestrator.host.Host`: this machine, or for a cluster
with a ``login`` section its login host over one ssh connection (the job dir is claimed there,
the files go over SFTP, ``sbatch`` runs there; the record, kept here, carries the login section
so that status/logs/wait/cancel reconnect). Nothing is written here before Slurm accepted the job.
"""

from __future__ import annotations

import datetime as _dt
import os
import posixpath
from dataclasses import dataclass
from typing import List, Optional, Sequence, Union

from sporch.orchestrator.errors import SporchError
from sporch.orchestrator.host import LOCAL, Host, host_for
from sporch.orchestrator.jobs import store
from sporch.orchestrator.jobs.store import JobRecord
from sporch.orchestrator.plan.planner import make_plan
from sporch.orchestrator.remote.login import login_dict
from sporch.orchestrator.slurm.query import TestOnlyResult, test_only
from sporch.orchestrator.contract.plan import Plan
from sporch.orchestrator.submit.backend import DEFAULT_BACKEND, Backend
from sporch.orchestrator.submit.registry import get_backend
from sporch.orchestrator.submit.request import SubmitRequest, build_request, default_job_dir


@dataclass(frozen=True)
class Prepared:
    """A planned request whose job dir now exists (empty) on ``host``. ``created_root``: the
    topmost folder sporch created for it, removed again when the submission does not go through."""

    request: SubmitRequest
    created_root: str
    host: Host = LOCAL


def claim_job_dir(host: Host, path: str) -> tuple[str, str]:
    """Create ``path`` (or ``path-2``, ``path-3``...) on ``host``; return it and the topmost
    folder created."""
    base = path.rstrip("/") or path
    top = host.makedirs(posixpath.dirname(base))
    candidate, n = base, 1
    while True:
        try:
            host.mkdir(candidate)
            return candidate, top or candidate
        except FileExistsError:
            n += 1
            candidate = f"{base}-{n}"


def named_job_dir(host: Host, path: str) -> str:
    """The absolute job dir the user named (``--out``, ``--job-dir``, ``--run-dir``). On this
    machine a symbolic link at that name is refused, dangling or not: the job's files would land
    at its target, and sporch writes nothing through a link at a name the user gave (as ``-o``
    names are refused). A link higher up the path (``/scratch`` -> ``/lustre/scratch``) is the
    user's own layout and is followed."""
    if not host.remote:
        named = os.path.abspath(os.path.expanduser(path))
        if os.path.islink(named):
            raise SporchError(f"job dir {path} is a symbolic link (to {os.readlink(named)}); sporch writes a job's "
                              "files into the folder named, never through a link: name a new folder")
    return host.abspath(path)


def prepare(cluster, job, *, job_dir: Optional[str] = None, now: Optional[_dt.datetime] = None,
            host: Optional[Host] = None, plan: Optional[Plan] = None) -> Prepared:
    """Plan the job (``plan``: already made by the caller) and claim its (new, empty) job dir on
    ``host`` (default: the cluster's: this machine, or its login host over ssh); the request's
    script names that dir."""
    now = now or _dt.datetime.now()
    if plan is None:  # first: a bad job is an error before anything is written or connected
        plan = make_plan(cluster, job)
    host = host or host_for(cluster.login)
    if job_dir is None:
        claimed, root = claim_job_dir(host, host.abspath(default_job_dir(cluster, job, now)))
    else:
        claimed = named_job_dir(host, job_dir)
        if host.exists(claimed) and host.listdir(claimed):
            where = f" on {host.where}" if host.remote else ""
            raise SporchError(f"job dir {claimed}{where} exists and is not empty; pick a new --job-dir")
        root = host.makedirs(claimed) or claimed
    try:
        return Prepared(build_request(cluster, job, job_dir=claimed, now=now, plan=plan), root, host)
    except BaseException:
        remove_job_dir(host, claimed, root)
        raise


def remove_job_dir(host: Host, job_dir: str, top: str) -> None:
    """Remove a job dir that never became a job, and the empty folders sporch made for it
    (up to ``top``). Best effort: the error that led here matters more."""
    try:
        host.remove_tree(job_dir)
        p = posixpath.dirname(job_dir)
        while p.startswith(top) and p != posixpath.dirname(top) and host.rmdir(p):
            p = posixpath.dirname(p)
    except Exception:  # noqa: BLE001
        pass


def write_files(request: SubmitRequest, host: Host = LOCAL) -> None:
    for rel, text in request.files().items():
        host.write_text(posixpath.join(request.job_dir, rel), text)
    host.makedirs(request.job.files.logs)  # Slurm does not create the log folder


def submit(prepared: Prepared, *, backend: Union[str, Backend] = DEFAULT_BACKEND, command: Sequence[str] = (),
           now: Optional[_dt.datetime] = None) -> JobRecord:
    """Submit a prepared request (its job dir exists and is empty) through ``backend`` (a name,
    or a Backend object). Returns the saved record."""
    now = now or _dt.datetime.now()
    request = prepared.request
    jd = request.job_dir
    record: Optional[JobRecord] = None
    submitted = None
    host = prepared.host
    try:
        impl = get_backend(backend, host, request.cluster) if isinstance(backend, str) else backend
        write_files(request, host)
        submitted = impl.submit(request)
        plan = request.plan
        record = JobRecord(
            id=store.make_id(plan.job.name, now),  # made unique by save_new
            name=plan.job.name,
            cluster=request.cluster,
            backend=submitted.backend,
            backend_job_id=submitted.backend_job_id,
            job_dir=jd,
            submitted=now.isoformat(timespec="seconds"),
            command=list(command),
            world_size=plan.world_size,
            nodes=plan.nodes,
            workload=plan.workload.kind,
            logs=dict(submitted.logs),
            remote=login_dict(host) if host.remote else None,
        )
        store.save_new(record, host=host)
        return record
    except BaseException:
        if submitted is not None:  # accepted, but we could not record it: take it back
            try:
                impl.cancel([submitted.backend_job_id])
            except Exception:  # noqa: BLE001 - best effort; the original error matters
                pass
        if record is not None:
            store.delete(record.id)
        remove_job_dir(host, jd, prepared.created_root)
        raise


def check(request: SubmitRequest) -> TestOnlyResult:
    """``sbatch --test-only`` on the rendered script, fed to sbatch on stdin (on the login host
    for a cluster with a login section); submits nothing, writes nothing.
    Returns ``sporch.orchestrator.slurm.query.TestOnlyResult``."""
    return test_only(host=host_for(request.plan.cluster.login), script_text=request.script)


def command_line(argv: Sequence[str]) -> List[str]:
    """The command as the user typed it (recorded with the job)."""
    return ["sporch", *argv]
