"""``sporch submit``: plan, then submit through submitit (default) or the rendered sbatch script.

``--dry-run`` shows the plan, the destination and the script and submits nothing; ``--check``
asks the real scheduler (``sbatch --test-only``) whether it would accept the job.
"""

from __future__ import annotations

import json
import sys
from typing import Optional

import click

from sporch.orchestrator.cli.common import cluster_option, console, invocation, job_arguments, load
from sporch.orchestrator.cli.show import print_plan
from sporch.orchestrator.cli.terminal import echo
from sporch.orchestrator.contract.numbers import counted
from sporch.orchestrator.submit.backend import remote_backend_error
from sporch.orchestrator.submit.request import build_request


@click.command("submit", short_help="Submit a job (--dry-run: show what would run where).")
@cluster_option
@job_arguments
@click.option("--dry-run", is_flag=True, help="Show what would run where; submit nothing.")
@click.option("--check", is_flag=True,
              help="Ask Slurm whether it would accept the job (sbatch --test-only); submit nothing.")
@click.option("--via", "backend", type=click.Choice(["submitit", "sbatch"]), default=None,
              help="submitit (default): one submitit job running the runtime per task; sbatch: the rendered "
                   "script (the one --dry-run shows). Clusters with a login section (ssh) use sbatch.")
@click.option("--job-dir", default=None, help="Job folder on the cluster (default: <output_dir>/<name>/<time>).")
@click.option("--no-script", is_flag=True, help="Do not print the batch script (--dry-run).")
@click.option("--wait", "wait_after", is_flag=True, help="Wait for the job to end (like `sporch wait`).")
@click.option("--json", "as_json", is_flag=True, help="Print the job record as JSON.")
def submit(cluster_ref: str, job_path: str, overrides: tuple, dry_run: bool, check: bool, backend: str,
           job_dir: Optional[str], no_script: bool, wait_after: bool, as_json: bool) -> None:
    """Submit JOB.yaml to --cluster; prints the job's id (use it with status/logs/wait/cancel)."""
    if dry_run and check:
        raise click.UsageError("--dry-run and --check are exclusive")
    cluster, job = load(cluster_ref, job_path, overrides)
    if cluster.login is not None:  # remote: over ssh, the rendered script only
        if backend == "submitit":
            raise remote_backend_error(backend, cluster.name)
        backend = "sbatch"
    backend = backend or "submitit"
    if dry_run:
        req = build_request(cluster, job, job_dir=job_dir)

        con = console()
        print_plan(req.plan, con, ranks=req.plan.world_size <= 16)
        if backend == "sbatch":
            echo(f"dry run   nothing submitted; would run `{req.sbatch_command()}` via {req.destination}", indent=10)
        else:
            echo(f"dry run   nothing submitted; would submit through submitit via {req.destination}, with "
                 f"the resources of `{req.sbatch_command()}` (--via sbatch submits that script)", indent=10)
        echo(f"job dir   {req.job_dir}", indent=10)
        echo("files     plan.json and job.sbatch, not written (`sporch render --out DIR` writes them)", indent=10)
        if not no_script:
            click.echo("---- job.sbatch ----")
            click.echo(req.script, nl=False)
        return

    # Submitting needs the backends, the job store and the ssh/Slurm runners; the dry run none
    # of them (tests/test_architecture.py, LAZY_ALLOWED).
    from sporch.orchestrator.submit import submitter

    if check:
        req = build_request(cluster, job, job_dir=job_dir)
        res = submitter.check(req)
        res.raise_if_rejected()
        if res.start_time:
            echo(f"ok        Slurm would accept {req.plan.job.name}: start at {res.start_time} using "
                 f"{res.processors} processors on {res.nodes}"
                 + (f" in partition {res.partition}" if res.partition else "") + " (nothing submitted)", indent=10)
        else:
            click.echo(f"ok        Slurm would accept {req.plan.job.name} (nothing submitted)")
        return

    prepared = submitter.prepare(cluster, job, job_dir=job_dir)
    rec = submitter.submit(prepared, backend=backend, command=submitter.command_line(invocation()))
    req = prepared.request
    if as_json:
        click.echo(json.dumps(rec.to_dict(), indent=2))
    else:
        plan = req.plan
        echo(f"submitted {rec.id}  (Slurm job {rec.backend_job_id}, via {rec.backend}) on {rec.cluster}: "
             f"{counted(plan.nodes, 'node')} x {plan.gpus_per_node} = {plan.world_size} ranks", indent=10)
        echo(f"job dir   {rec.job_dir}" + (f" on {rec.remote['user']}@{rec.remote['host']}" if rec.remote else ""),
             indent=10)
        echo(f"next      sporch status {rec.id} | sporch logs {rec.id} -f | sporch wait {rec.id}", indent=10)
    if wait_after:
        from sporch.orchestrator.cli.wait_cmd import wait_for

        code = wait_for(rec, timeout=None, interval=2.0, quiet=as_json)
        sys.exit(code)
