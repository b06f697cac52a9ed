"""``sporch submit``: in this version only ``--dry-run`` (plan + script + destination)."""

from __future__ import annotations

from typing import Optional

import click

from orchestrator.cli.common import cluster_option, console, job_arguments, load


@click.command("submit")
@cluster_option
@job_arguments
@click.option("--dry-run", is_flag=True, help="Show what would run where; submit nothing.")
@click.option("--job-dir", default=None, help="Job folder on the cluster (default: <output_dir>/<name>/<time>).")
@click.option("--no-script", is_flag=True, help="Do not print the batch script.")
def submit(cluster_ref: str, job_path: str, overrides: tuple, dry_run: bool, job_dir: Optional[str],
           no_script: bool) -> None:
    """Submit JOB.yaml to --cluster (use --dry-run to see the plan and the script)."""
    from orchestrator.errors import SporchError
    from orchestrator.submit.request import build_request, write_dry_run

    cluster, job = load(cluster_ref, job_path, overrides)
    req = build_request(cluster, job, job_dir=job_dir)
    if not dry_run:
        raise SporchError(
            "real submission is not available in this version of sporch; add --dry-run to see what would be submitted"
        )
    from orchestrator.cli.show import print_plan

    con = console()
    print_plan(req.plan, con, ranks=req.plan.world_size <= 16)
    tmp = write_dry_run(req)
    click.echo(f"dry run   nothing submitted; would run `{req.sbatch_command()}` via {req.destination}")
    click.echo(f"job dir   {req.job_dir}")
    click.echo(f"files     {tmp}/plan.json, {tmp}/job.sbatch (local copies for inspection)")
    if not no_script:
        click.echo("---- job.sbatch ----")
        click.echo(req.script, nl=False)
