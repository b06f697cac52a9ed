"""``sporch campaign run`` and ``sporch campaign status`` (registered in campaign_cmd's group)."""

from __future__ import annotations

from pathlib import Path
from typing import Dict, Optional

import click

from sporch.orchestrator.campaign import runner
from sporch.orchestrator.campaign.folder import CampaignDir, read_json
from sporch.orchestrator.campaign.history_record import record_quietly
from sporch.orchestrator.campaign.intents import reconcile
from sporch.orchestrator.campaign.lock import try_state_lock
from sporch.orchestrator.campaign.track import CampaignState, refresh
from sporch.orchestrator.cli.campaign_history_cmd import warn
from sporch.orchestrator.cli.common import GRACE_SECONDS, Seconds, console, invocation, json_text, plain_table
from sporch.orchestrator.cli.terminal import shown
from sporch.orchestrator.cli.wait_cmd import report_retry
from sporch.orchestrator.contract.exit_codes import EXIT_FAILED
from sporch.orchestrator.errors import SporchError
from sporch.orchestrator.jobs.retry import DEFAULT_GRACE_S, STATUS_GRACE_S, default_grace, retry_unreachable
from sporch.orchestrator.submit.submitter import command_line
from sporch.orchestrator.contract.numbers import counted


class ProgressView:
    """Points pending / running / done / failed: a rich bar on a terminal, else one line
    each time the counts change."""

    def __init__(self, con, total: int, title: str) -> None:
        from rich.progress import BarColumn, Progress, SpinnerColumn, TextColumn, TimeElapsedColumn

        self.con = con
        self.last = ""
        self.bar = Progress(SpinnerColumn(), TextColumn(title), BarColumn(), TextColumn("{task.fields[counts]}"),
                            TimeElapsedColumn(), console=con, transient=True, disable=not con.is_terminal)
        self.task = self.bar.add_task(title, total=total, counts="")

    def __enter__(self) -> "ProgressView":
        self.bar.__enter__()
        return self

    def __exit__(self, *exc) -> None:
        self.bar.__exit__(*exc)

    def show(self, counts: Dict[str, int], note: str = "") -> None:
        text = shown(", ".join(f"{n} {c}" for c, n in counts.items()) + (f" ({note})" if note else ""), one_line=True)
        self.bar.update(self.task, completed=counts.get("done", 0) + counts.get("failed", 0), counts=text)
        if not self.con.is_terminal and text != self.last:
            self.con.print(text)
        self.last = text


@click.command("run")
@click.argument("campaign_file", metavar="CAMPAIGN.yaml", type=click.Path(dir_okay=False))
@click.option("--local", "local", is_flag=True,
              help="Run the points on this machine, one after another, as local CPU runs.")
@click.option("--detach", is_flag=True, help="Return right after submitting (follow with `campaign status DIR`).")
@click.option("--interval", default=5.0, show_default=True, type=Seconds(0.1, inclusive=True),
              help="Seconds between polls of the queue while waiting.")
@click.option("--grace", "grace_s", type=GRACE_SECONDS, default=None,
              help=f"Seconds to keep retrying while Slurm or the login host cannot be reached "
                   f"(default $SPORCH_GRACE_S or {DEFAULT_GRACE_S:g}); then exit 75.")
def run_cmd(campaign_file: str, local: bool, detach: bool, interval: float, grace_s: Optional[float]) -> None:
    """Run CAMPAIGN.yaml: one Slurm job array per resource group (here, or over ssh for a
    cluster with a login section), or --local; re-running resumes (finished points are kept,
    failed ones resubmitted up to run.retries, arrays an interrupted run submitted are found
    in the queue and not submitted again)."""
    if local and detach:
        raise SporchError("--detach submits to Slurm and returns; --local runs the points in the foreground: "
                          "use one of them")
    session = runner.open_session(campaign_file, command_line(invocation()),
                                  grace_s=default_grace(DEFAULT_GRACE_S, grace_s), on_retry=report_retry)
    con = console(stderr=True)
    try:
        snap = session.poll()
        todo = session.todo(snap)
        total = len(session.point_ids)
        con.print(f"[bold]campaign[/] {shown(session.campaign.name)}: {counted(total, 'point')} in {counted(len(session.groups), 'group')}, "
                  f"directory {shown(session.cdir.root)}; {snap.counts()['done']} done, {len(todo)} to "
                  f"{'run here' if local else 'submit'}")
        if local:
            snap = _run_local(session, todo, con, total)
        else:
            for sub in runner.submit_arrays(session, todo):
                con.print(shown(f"group {sub.group}: {counted(len(sub.points), 'point')} submitted as job array {sub.job_id} "
                                f"({sub.where})"))
            if detach:
                con.print(f"detached; follow with `sporch campaign status {shown(session.cdir.root)}`")
                return
            with ProgressView(con, total, "points") as view:
                snap = runner.wait(session, interval=interval, on_poll=lambda s: view.show(s.counts()))
        _record_history(session.cdir)
        _summary(session, snap, con, campaign_file)
    finally:
        session.release()


def _run_local(session, todo, con, total):
    snap = session.poll()
    with ProgressView(con, total, "points") as view:
        def on_point(pid: str, outcome: Optional[str]) -> None:
            counts = session.poll(local_runner_alive=outcome is None).counts()
            view.show(counts, f"{pid} {'running' if outcome is None else outcome.lower()}")

        runner.run_local_points(session, todo, on_point=on_point)
        snap = session.poll()
        view.show(snap.counts())
    return snap


def _record_history(cdir: CampaignDir) -> None:
    """The completed points into the history store (docs/campaigns.md); a store that cannot be
    written is a warning, never the campaign's failure."""
    warn([w for w in [record_quietly(cdir.root)] if w])


def _summary(session, snap, con, campaign_file: str) -> None:
    counts = snap.counts()
    con.print(f"campaign {shown(session.campaign.name)}: " + ", ".join(f"{n} {c}" for c, n in counts.items()))
    errors = _failures(session.state, snap.ids("failed"))
    if errors:
        _failure_table(con, errors, _values(session.cdir))
        left = [pid for pid in errors if session.state.submissions(pid) < session.max_submissions]
        if left:
            con.print(f"{counted(len(left), 'failed point')} with retries left: run `sporch campaign run {shown(campaign_file)}` "
                      "again to resubmit them")
    if counts["done"] == len(snap.categories):
        con.print(f"all points done; report: `sporch campaign report {shown(session.cdir.root)}`")
        return
    if snap.active:  # --local left points that are in a Slurm queue
        con.print(f"{counted(counts['pending'] + counts['running'], 'point')} still in a queue: "
                  f"`sporch campaign status {shown(session.cdir.root)}`")
    click.get_current_context().exit(EXIT_FAILED)


def _failures(state, ids) -> Dict[str, str]:
    return {pid: state.point(pid).get("error") or state.point(pid).get("state") or "failed" for pid in ids}


def _values(cdir) -> Dict[str, dict]:
    try:
        return {pid: rec.get("values") or {} for pid, rec in read_json(cdir.manifest)["points"].items()}
    except (OSError, ValueError, KeyError):
        return {}


def _failure_table(con, errors: Dict[str, str], values: Dict[str, dict]) -> None:
    t = plain_table(title=f"failed: {len(errors)}", title_justify="left")
    for col in ("id", "gpus", "layout", "shape", "error"):
        t.add_column(col, overflow="fold")
    for pid, err in errors.items():
        v = values.get(pid, {})
        t.add_row(pid, str(v.get("gpus", "")), str(v.get("layout", "")), str(v.get("shape", "")), str(err))
    con.print(t)


@click.command("status")
@click.argument("directory", metavar="DIR", type=click.Path(file_okay=False))
@click.option("--json", "as_json", is_flag=True, help="Print counts, states and errors as JSON.")
@click.option("--grace", "grace_s", type=GRACE_SECONDS, default=None,
              help=f"Seconds to keep retrying while Slurm or the login host cannot be reached "
                   f"(default $SPORCH_GRACE_S or {STATUS_GRACE_S:g}); then exit 75.")
def status_cmd(directory: str, as_json: bool, grace_s: Optional[float]) -> None:
    """Points of the campaign in DIR by state (pending/running/done/failed) and the failing
    ones with their error line: one squeue call for all arrays, sacct once for ended ones."""
    cdir = CampaignDir(Path(directory))
    values = _values(cdir)
    if not values:
        raise SporchError(f"{directory} is not a prepared campaign directory (no manifest.json with points); "
                          "run `sporch campaign run FILE` first")
    state = CampaignState.load(cdir)
    # saved only when no runner holds the directory (a runner's own state wins); the runner's
    # .lock is never taken here, so a status never keeps a runner out (lock.try_state_lock)
    saving = try_state_lock(cdir.root)

    def poll():
        if state.intents:  # an interrupted run's submissions: found in the queue, or dropped
            reconcile(state)
        return refresh(cdir, state, list(values), local_runner_alive=saving is None)

    try:
        snap = retry_unreachable(poll, grace_s=default_grace(STATUS_GRACE_S, grace_s), on_retry=report_retry)
        if saving is not None:
            state.save(cdir)
    finally:
        if saving is not None:
            saving.release()
    if snap.ids("done"):
        _record_history(cdir)
    errors = _failures(state, snap.ids("failed"))
    if as_json:
        click.echo(json_text({"counts": snap.counts(), "points": snap.categories, "failed": errors,
                              "arrays": [a["job_id"] for a in state.arrays]}))
        return
    con = console()
    con.print(shown(f"campaign {cdir.root}: {len(values)} points: " + snap.text()))
    if errors:
        _failure_table(con, errors, values)
