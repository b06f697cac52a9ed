"""``sporch cancel JOB ...``: cancel through each job's backend on its host (scancel here or on
the login host of jobs submitted over ssh), saying what state each job was in."""

from __future__ import annotations

import datetime as _dt

import click

from sporch.orchestrator.jobs import store
from sporch.orchestrator.jobs.status import poll, record_host
from sporch.orchestrator.submit.registry import get_backend


@click.command("cancel", short_help="Cancel submitted jobs (scancel).")
@click.argument("jobs", nargs=-1, required=True, metavar="JOB...")
def cancel(jobs: tuple) -> None:
    """Cancel JOBs (sporch id, Slurm job id or name). Finished jobs are left alone."""
    recs = store.load_all()
    targets = []
    for ref in jobs:
        r = store.find(ref, recs)
        if all(t.id != r.id for t in targets):
            targets.append(r)
    statuses = poll(targets)
    live = [(r, s) for r, s in zip(targets, statuses) if not s.terminal]
    for r, s in zip(targets, statuses):
        if s.terminal:
            click.echo(f"{r.id}: already {s.state} (Slurm job {r.backend_job_id}); nothing to cancel")
    if not live:
        return
    # one cancel call per backend and host: here, and each login host of jobs submitted over ssh
    batches: dict = {}
    for r, _ in live:
        host = record_host(r)
        batches.setdefault((r.backend, id(host)), (host, []))[1].append(r)
    for (backend, _), (host, recs) in batches.items():
        get_backend(backend, host).cancel([r.backend_job_id for r in recs])
    stamp = _dt.datetime.now().isoformat(timespec="seconds")
    for r, s in live:
        r.cancelled = stamp
        store.save(r)
        click.echo(f"{r.id}: cancelled Slurm job {r.backend_job_id} (was {s.state})")
