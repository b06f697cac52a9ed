"""``sporch render``: the batch script of a job on a cluster."""

from __future__ import annotations

from typing import Optional

import click

from orchestrator.cli.common import cluster_option, job_arguments, load


@click.command("render")
@cluster_option
@job_arguments
@click.option("--job-dir", default=None, help="Job folder on the cluster (default: <output_dir>/<name>/<time>).")
@click.option("--output", "-o", "output", default=None, type=click.Path(dir_okay=False),
              help="Write the script to this file instead of stdout.")
def render(cluster_ref: str, job_path: str, overrides: tuple, job_dir: Optional[str], output: Optional[str]) -> None:
    """Print the Slurm batch script for JOB.yaml on --cluster."""
    from orchestrator.submit.request import build_request

    cluster, job = load(cluster_ref, job_path, overrides)
    req = build_request(cluster, job, job_dir=job_dir)
    if output:
        with open(output, "w", encoding="utf-8") as fh:
            fh.write(req.script)
        click.echo(f"wrote {output}", err=True)
    else:
        click.echo(req.script, nl=False)
