"""``sporch cancel JOB ...``: scancel (on the login host for jobs submitted over ssh), saying
what state each job was in."""

from __future__ import annotations

import datetime as _dt

import click


@click.command("cancel")
@click.argument("jobs", nargs=-1, required=True, metavar="JOB...")
def cancel(jobs: tuple) -> None:
    """Cancel JOBs (sporch id, Slurm job id or name). Finished jobs are left alone."""
    from orchestrator.jobs import store
    from orchestrator.jobs.status import poll
    from orchestrator.slurm.commands import scancel

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
            click.echo(f"{r.id}: already {s.state} (Slurm job {r.slurm_job_id}); nothing to cancel")
    if not live:
        return
    # one scancel per place: here, and each login host of jobs submitted over ssh
    by_host: dict = {}
    for r, _ in live:
        key = None if not r.remote else (r.remote.get("host"), r.remote.get("port"), r.remote.get("user"))
        by_host.setdefault(key, []).append(r)
    for key, recs in by_host.items():
        if key is None:
            scancel([r.slurm_job_id for r in recs])
        else:
            from orchestrator.remote.ssh import runner_for

            scancel([r.slurm_job_id for r in recs], runner=runner_for(recs[0].remote))
    stamp = _dt.datetime.now().isoformat(timespec="seconds")
    for r, s in live:
        r.cancelled = stamp
        store.save(r)
        click.echo(f"{r.id}: cancelled Slurm job {r.slurm_job_id} (was {s.state})")
