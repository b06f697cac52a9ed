"""Submit a request: job dir, backend, record -- all or nothing.

1. the job dir is claimed (created; a ``-2``, ``-3``... suffix when that second is taken);
2. ``plan.json``, ``job.sbatch`` and ``logs/`` are written into it;
3. the backend submits;
4. the record is written (``$SPORCH_HOME/jobs/<id>.json`` and ``<job_dir>/record.json``).

When Slurm rejects the job (or anything else fails) the job dir is removed and no record is
written; when writing the record fails after Slurm accepted the job, the job is cancelled.

A cluster with a ``login`` section is remote: the same steps run over one ssh connection
(:mod:`orchestrator.remote.ssh`): the job dir is claimed on the login host, the files go over
SFTP, ``sbatch`` runs there (:mod:`.ssh_backend`), the record (kept here) carries the login
section so that status/logs/wait/cancel reconnect. Nothing is written here before Slurm
accepted the job.
"""

from __future__ import annotations

import datetime as _dt
import os
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any, List, Optional, Sequence

from orchestrator.errors import SporchError
from orchestrator.jobs import store
from orchestrator.jobs.store import JobRecord
from orchestrator.submit.backend import DEFAULT_BACKEND, get_backend, get_remote_backend
from orchestrator.plan.planner import make_plan
from orchestrator.submit.request import SubmitRequest, build_request, default_job_dir


@dataclass(frozen=True)
class Prepared:
    """A planned request whose job dir now exists (empty). ``created_root``: the topmost
    folder sporch created for it, removed again when the submission does not go through."""

    request: SubmitRequest
    created_root: str
    host: Any = None  # remote: the connected orchestrator.remote.ssh.SshHost holding the job dir


def _first_missing(path: Path) -> Optional[Path]:
    top = None
    for p in [path, *path.parents]:
        if p.exists():
            break
        top = p
    return top


def claim_job_dir(path: str) -> tuple[str, str]:
    """Create ``path`` (or ``path-2``, ``path-3``...); return it and the topmost folder created."""
    base = path.rstrip("/") or path
    candidate, n = base, 1
    top = _first_missing(Path(base).parent)
    Path(base).parent.mkdir(parents=True, exist_ok=True)
    while True:
        try:
            os.mkdir(candidate)
            return candidate, str(top) if top is not None else candidate
        except FileExistsError:
            n += 1
            candidate = f"{base}-{n}"
        except OSError as e:
            raise SporchError(f"cannot create the job dir {candidate}: {e.strerror}") from None


def prepare(cluster, job, *, job_dir: Optional[str] = None, now: Optional[_dt.datetime] = None
            ) -> Prepared:
    """Plan the job and claim its (new, empty) job dir; the request's script names that dir."""
    now = now or _dt.datetime.now()
    if cluster.login is not None:
        return _prepare_remote(cluster, job, job_dir=job_dir, now=now)
    plan = make_plan(cluster, job)  # first: a bad job is an error before anything is written
    if job_dir is None:
        claimed, root = claim_job_dir(default_job_dir(cluster, job, now))
    else:
        claimed = str(Path(job_dir).expanduser().resolve())
        if Path(claimed).exists() and any(Path(claimed).iterdir()):
            raise SporchError(f"job dir {claimed} exists and is not empty; pick a new --job-dir")
        top = _first_missing(Path(claimed))
        Path(claimed).mkdir(parents=True, exist_ok=True)
        root = str(top) if top is not None else claimed
    try:
        return Prepared(build_request(cluster, job, job_dir=claimed, now=now, plan=plan), root)
    except BaseException:
        remove_job_dir(claimed, root)
        raise


def _prepare_remote(cluster, job, *, job_dir: Optional[str], now: _dt.datetime) -> Prepared:
    """Connect to the login host and claim the job dir there (nothing is written here)."""
    import posixpath

    from orchestrator.remote.ssh import connect

    plan = make_plan(cluster, job)  # first: a bad job fails before connecting
    host = connect(cluster.login)
    if job_dir is None:
        base = host.abspath(default_job_dir(cluster, job, now))
        top = host.makedirs(posixpath.dirname(base))
        candidate, n = base, 1
        while True:
            try:
                host.mkdir(candidate)
                break
            except FileExistsError:
                n += 1
                candidate = f"{base}-{n}"
        claimed = candidate
    else:
        claimed = host.abspath(job_dir)
        if host.exists(claimed) and host.listdir(claimed):
            raise SporchError(f"job dir {claimed} on {host.where} exists and is not empty; pick a new --job-dir")
        top = host.makedirs(claimed)
    root = top or claimed
    try:
        return Prepared(build_request(cluster, job, job_dir=claimed, now=now, plan=plan), root, host)
    except BaseException:
        _remove_remote_job_dir(host, claimed, root)
        raise


def _remove_remote_job_dir(host, job_dir: str, top: str) -> None:
    import posixpath

    try:
        host.remove_tree(job_dir)
        p = posixpath.dirname(job_dir)
        while p.startswith(top) and p != posixpath.dirname(top) and host.rmdir(p):
            p = posixpath.dirname(p)
    except Exception:  # noqa: BLE001 - best effort: the original error matters
        pass


def remove_job_dir(job_dir: str, top: str, host: Any = None) -> None:
    """Remove a job dir that never became a job, and the empty folders sporch made for it
    (up to ``top``); on the login host when ``host`` is given."""
    if host is not None:
        _remove_remote_job_dir(host, job_dir, top)
        return
    shutil.rmtree(job_dir, ignore_errors=True)
    p = Path(job_dir).parent
    stop = Path(top)
    while p != stop.parent and str(p).startswith(str(stop)):
        try:
            p.rmdir()  # only when empty
        except OSError:
            break
        p = p.parent


def write_files(request: SubmitRequest, host: Any = None) -> None:
    if host is not None:  # over SFTP
        import posixpath

        for rel, text in request.files().items():
            host.write_text(posixpath.join(request.job_dir, rel), text)
        host.makedirs(posixpath.join(request.job_dir, "logs"))
        return
    root = Path(request.job_dir)
    for rel, text in request.files().items():
        (root / rel).write_text(text, encoding="utf-8")
    (root / "logs").mkdir(exist_ok=True)  # Slurm does not create the log folder


def submit(prepared: Prepared, *, backend: str = DEFAULT_BACKEND, command: Sequence[str] = (),
           now: Optional[_dt.datetime] = None) -> JobRecord:
    """Submit a prepared request (its job dir exists and is empty). Returns the saved record."""
    now = now or _dt.datetime.now()
    request = prepared.request
    jd = request.job_dir
    record: Optional[JobRecord] = None
    submitted = None
    host = prepared.host
    try:
        impl = get_backend(backend) if host is None else get_remote_backend(backend, host, request.cluster)
        write_files(request, host)
        submitted = impl.submit(request)
        plan = request.plan
        record = JobRecord(
            id=store.unique_id(store.make_id(plan.job.name, now)),
            name=plan.job.name,
            cluster=request.cluster,
            backend=submitted.backend,
            slurm_job_id=submitted.slurm_job_id,
            job_dir=jd,
            submitted=now.isoformat(timespec="seconds"),
            command=list(command),
            world_size=plan.world_size,
            nodes=plan.nodes,
            workload=plan.workload.kind,
            logs=dict(submitted.logs),
        )
        if host is not None:
            from orchestrator.remote.ssh import login_dict

            record.remote = login_dict(host)
        store.save(record)
        if host is not None:  # the job dir's copy, best effort (the local record is the authority)
            try:
                import json
                import posixpath

                host.write_text(posixpath.join(jd, store.RECORD_FILE), json.dumps(record.to_dict(), indent=2) + "\n")
            except Exception:  # noqa: BLE001
                pass
        return record
    except BaseException:
        if submitted is not None:  # accepted, but we could not record it: take it back
            try:
                from orchestrator.slurm.commands import scancel

                if host is None:
                    scancel(submitted.slurm_job_id)
                else:
                    from orchestrator.remote.ssh import SshRunner

                    scancel(submitted.slurm_job_id, runner=SshRunner(host))
            except Exception:  # noqa: BLE001 - best effort; the original error matters
                pass
        if record is not None:
            store.delete(record.id)
        remove_job_dir(jd, prepared.created_root, host)
        raise


def check(request: SubmitRequest):
    """``sbatch --test-only`` on the rendered script (written to a temporary folder; remote: fed
    to sbatch on the login host on stdin); submits nothing, writes nothing under the job dir.
    Returns ``orchestrator.slurm.query.TestOnlyResult``."""
    import tempfile

    from orchestrator.render import SCRIPT_FILE
    from orchestrator.slurm.query import test_only

    if request.remote:
        from orchestrator.remote.ssh import runner_for

        return test_only(runner=runner_for(request.plan.cluster.login), script_text=request.script)
    with tempfile.TemporaryDirectory(prefix="sporch-check-") as tmp:
        script = Path(tmp) / SCRIPT_FILE
        script.write_text(request.script, encoding="utf-8")
        return test_only(script)


def command_line(argv: Sequence[str]) -> List[str]:
    """The command as the user typed it (recorded with the job)."""
    return ["sporch", *argv]
