"""``sporch status [JOB ...]``: known jobs and their states (one squeue call per poll)."""

from __future__ import annotations

import click

from sporch.orchestrator.cli.common import GRACE_SECONDS, console, json_text, plain_table
from sporch.orchestrator.cli.terminal import visible
from sporch.orchestrator.cli.wait_cmd import report_retry
from sporch.orchestrator.jobs import store
from sporch.orchestrator.jobs.retry import STATUS_GRACE_S, default_grace, retry_unreachable
from sporch.orchestrator.jobs.status import poll
from sporch.orchestrator.jobs.store import jobs_dir



def _records(refs, show_all: bool, last: int):
    if refs:
        recs = store.load_all()
        out, seen = [], set()
        for ref in refs:
            r = store.find(ref, recs)
            if r.id not in seen:
                seen.add(r.id)
                out.append(r)
        return out
    recs, bad = store.load_all_checked()
    for path, why in bad:  # one bad file must not hide the other jobs
        click.echo(visible(f"sporch: warning: unreadable job record {path} ({why}); skipped", one_line=True), err=True)
    return recs if show_all else recs[-last:]


@click.command("status", short_help="States of submitted jobs (failed rank and error line).")
@click.argument("jobs", nargs=-1, metavar="[JOB]...")
@click.option("--all", "show_all", is_flag=True, help="Every known job (default: the latest --last).")
@click.option("--last", default=20, show_default=True, help="How many of the latest jobs to show.")
@click.option("--json", "as_json", is_flag=True, help="Print the statuses as JSON.")
@click.option("--refresh", is_flag=True, help="Ask Slurm again about jobs whose final state is cached.")
@click.option("--grace", "grace_s", type=GRACE_SECONDS, default=None,
              help=f"Seconds to keep retrying while Slurm or the login host cannot be reached "
                   f"(default $SPORCH_GRACE_S or {STATUS_GRACE_S:g}); then exit 75.")
def status(jobs: tuple, show_all: bool, last: int, as_json: bool, refresh: bool, grace_s) -> None:
    """State of JOBs (sporch id, Slurm job id or name; default: the latest jobs).

    Final states come from sacct when the cluster keeps accounting, else from the job
    directory. A running job shows its progress (step i/N), a finished one what it measured
    (verify error or step time); for a job that did not complete, the failed rank and its error
    line are shown.
    """
    recs = _records(jobs, show_all, last)
    statuses = retry_unreachable(lambda: poll(recs, refresh=refresh), on_retry=report_retry,
                                 grace_s=default_grace(STATUS_GRACE_S, grace_s))
    if as_json:
        click.echo(json_text([s.to_dict() for s in statuses]))
        return
    if not statuses:
        click.echo(visible(f"no jobs known (records in {jobs_dir()}); submit one with `sporch submit`"))
        return
    from rich.text import Text

    table = plain_table()  # fits the terminal without cutting a word (cli/tables.py)
    for col in ("job", "slurm id", "cluster", "state", "elapsed", "nodes", "outcome", "failed rank", "error"):
        table.add_column(col)
    colors = {"COMPLETED": "green", "RUNNING": "cyan", "PENDING": "yellow", "FAILED": "red", "CANCELLED": "magenta",
              "TIMEOUT": "red"}
    for s in statuses:
        state = s.state + (f" ({s.reason})" if s.reason and not s.terminal else "")
        if s.terminal and s.exit_code and s.exit_code != "0:0":
            state += f" exit {s.exit_code}"
        if s.progress and not s.terminal:
            state += f" {s.progress}"
        table.add_row(str(s.id), str(s.backend_job_id), str(s.cluster),
                      Text(visible(state, one_line=True), style=colors.get(s.state, "")),
                      s.elapsed or "-", str(s.nodelist or s.nodes or "-"), s.outcome or "-",
                      "-" if s.failed_rank is None else str(s.failed_rank), s.error or "")
    console().print(table)
