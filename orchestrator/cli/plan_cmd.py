"""``sporch plan``: layout, warnings, rank/group map and estimates (or the Plan as JSON)."""

from __future__ import annotations

import click

from orchestrator.cli.common import cluster_option, console, job_arguments, load
from orchestrator.cli.show import print_plan
from orchestrator.plan.planner import make_plan


@click.command("plan")
@cluster_option
@job_arguments
@click.option("--json", "as_json", is_flag=True, help="Print the Plan as JSON (the runtime's input).")
@click.option("--all-ranks", is_flag=True, help="List every rank, even for big worlds.")
def plan(cluster_ref: str, job_path: str, overrides: tuple, as_json: bool, all_ranks: bool) -> None:
    """Plan JOB.yaml on --cluster: layout, rank/group map, estimates."""
    cluster, job = load(cluster_ref, job_path, overrides)
    p = make_plan(cluster, job)
    if as_json:
        click.echo(p.to_json())
        return

    print_plan(p, console(), all_ranks=all_ranks)
