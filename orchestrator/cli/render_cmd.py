"""``sporch render``: the batch script of a job on a cluster, and the plan.json it points at, so
that the printed script can be submitted as it is (``sbatch job.sbatch``)."""

from __future__ import annotations

from pathlib import Path
from typing import Optional

import click

from sporch.orchestrator.cli.common import cluster_option, job_arguments, load
from sporch.orchestrator.errors import SporchError
from sporch.orchestrator.host import LOCAL
from sporch.orchestrator.submit.request import build_request
from sporch.orchestrator.submit.submitter import write_files


@click.command("render")
@cluster_option
@job_arguments
@click.option("--job-dir", default=None, help="Job folder on the cluster (default: <output_dir>/<name>/<time>).")
@click.option("--out", "out_dir", default=None, type=click.Path(file_okay=False),
              help="Make this folder the job dir: write plan.json, job.sbatch and logs/ into it.")
@click.option("--output", "-o", "output", default=None, type=click.Path(dir_okay=False),
              help="Write the script to this file instead of stdout.")
def render(cluster_ref: str, job_path: str, overrides: tuple, job_dir: Optional[str], out_dir: Optional[str],
           output: Optional[str]) -> None:
    """Print the Slurm batch script for JOB.yaml on --cluster, and write the plan.json it runs.

    The script names its job dir; plan.json (and logs/) are written there when that dir is on
    this machine (a cluster without a login section, or --out). For a cluster reached over ssh
    without --out, nothing is written: `sporch submit` uploads the files.
    """
    if out_dir and job_dir:
        raise click.UsageError("--out and --job-dir are exclusive (--out DIR makes DIR the job dir)")
    cluster, job = load(cluster_ref, job_path, overrides)
    if output and not Path(output).expanduser().resolve().parent.is_dir():
        raise SporchError(f"-o {output}: folder {Path(output).parent} does not exist; create it or pick another path")
    if out_dir:
        job_dir = LOCAL.abspath(out_dir)
        if Path(job_dir).is_dir() and any(Path(job_dir).iterdir()):
            raise SporchError(f"--out {job_dir} exists and is not empty; pick a new folder")
    req = build_request(cluster, job, job_dir=job_dir)
    if out_dir or cluster.login is None:
        LOCAL.makedirs(req.job_dir)
        write_files(req, LOCAL)
        click.echo(f"wrote {req.plan_path}, {req.script_path} and {req.job.files.logs}/", err=True)
    if output:
        try:
            with open(output, "w", encoding="utf-8") as fh:
                fh.write(req.script)
        except OSError as e:
            raise SporchError(f"cannot write -o {output}: {e.strerror}") from None
        click.echo(f"wrote {output}", err=True)
    else:
        click.echo(req.script, nl=False)
