"""``sporch render``: the batch script of a job on a cluster, and the plan.json it points at, so
that the printed script can be submitted as it is (``sbatch job.sbatch``)."""

from __future__ import annotations

from pathlib import Path
from typing import Optional

import click

from sporch.orchestrator.cli.common import cluster_option, job_arguments, load
from sporch.orchestrator.cli.terminal import echo
from sporch.orchestrator.safe_files import check_output, write_output
from sporch.orchestrator.errors import SporchError
from sporch.orchestrator.host import LOCAL
from sporch.orchestrator.submit.request import build_request
from sporch.orchestrator.submit.submitter import named_job_dir, prepare, remove_job_dir, write_files


@click.command("render", short_help="Print the Slurm batch script of a job.")
@cluster_option
@job_arguments
@click.option("--job-dir", default=None, help="Job folder on the cluster (default: <output_dir>/<name>/<time>).")
@click.option("--out", "out_dir", default=None, type=click.Path(file_okay=False),
              help="Make this folder the job dir: write plan.json, job.sbatch and logs/ into it.")
@click.option("--output", "-o", "output", default=None, type=click.Path(dir_okay=False),
              help="Write the script to this file instead of stdout.")
@click.option("--force", is_flag=True, help="Replace -o if it exists (a link there is replaced, never followed).")
def render(cluster_ref: str, job_path: str, overrides: tuple, job_dir: Optional[str], out_dir: Optional[str],
           output: Optional[str], force: bool) -> None:
    """Print the Slurm batch script for JOB.yaml on --cluster, and write the plan.json it runs.

    The script names its job dir; plan.json (and logs/) are written there when that dir is on
    this machine (a cluster without a login section, or --out): a new folder, as `submit`
    claims one. For a cluster reached over ssh without --out, nothing is written: `sporch
    submit` uploads the files.
    """
    if out_dir and job_dir:
        raise click.UsageError("--out and --job-dir are exclusive (--out DIR makes DIR the job dir)")
    cluster, job = load(cluster_ref, job_path, overrides)
    if output and not Path(output).expanduser().resolve().parent.is_dir():
        raise SporchError(f"-o {output}: folder {Path(output).parent} does not exist; create it or pick another path")
    if output:  # before anything is written: a name that is taken is refused (safe_files)
        check_output(output, force, "-o")
    if out_dir:
        job_dir = named_job_dir(LOCAL, out_dir)
        if Path(job_dir).exists() and (not Path(job_dir).is_dir() or any(Path(job_dir).iterdir())):
            raise SporchError(f"--out {job_dir} exists and is not empty (or not a folder); pick a new folder")
    if out_dir or cluster.login is None:
        # the job dir is claimed as `submit` claims it: a new folder (<time>-2, -3... when that
        # second's is taken), or the named one when it is new or empty; removed again on failure
        prepared = prepare(cluster, job, job_dir=job_dir, host=LOCAL)
        req = prepared.request
        try:
            write_files(req, LOCAL)
        except BaseException:
            remove_job_dir(LOCAL, req.job_dir, prepared.created_root)
            raise
        echo(f"wrote {req.plan_path}, {req.script_path} and {req.job.files.logs}/", err=True, indent=6)
    else:
        req = build_request(cluster, job, job_dir=job_dir)
    if output:
        try:
            write_output(output, req.script, force=force, option="-o")
        except OSError as e:
            raise SporchError(f"cannot write -o {output}: {e.strerror}") from None
        echo(f"wrote {output}", err=True, indent=6)
    else:
        click.echo(req.script, nl=False)
