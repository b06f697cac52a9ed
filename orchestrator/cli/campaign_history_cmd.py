"""``sporch campaign history``: a point's runs over time from the history store, and its rebuild
(registered in campaign_cmd's group; the store: orchestrator/campaign/history_store.py)."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Dict, List, Optional, Sequence, Tuple

import click

from sporch.orchestrator.campaign.collect import read_point, short_value
from sporch.orchestrator.campaign.compare import parse_threshold
from sporch.orchestrator.campaign.folder import POINT_FILE, CampaignDir
from sporch.orchestrator.campaign.history_record import rebuild, record_quietly
from sporch.orchestrator.campaign.history_runs import Run, campaign_name
from sporch.orchestrator.campaign.history_store import Store, required_store_path, store_path
from sporch.orchestrator.campaign.history_trends import DEFAULT_K, check_metric, histories
from sporch.orchestrator.campaign.history_view import describe, short_revision, trend_doc
from sporch.orchestrator.campaign.history_plot import draw_history
from sporch.orchestrator.cli.common import console, json_text, plain_table
from sporch.orchestrator.cli.terminal import visible
from sporch.orchestrator.contract.results import ResultFileError
from sporch.orchestrator.safe_files import check_output, write_output
from sporch.orchestrator.errors import SporchError
from sporch.orchestrator.contract.numbers import counted

#: Points one --plot draws at most (one panel each).
PLOT_POINTS = 12
#: Runs of a point the report's history section shows.
REPORT_RUNS = 20

STORE_HELP = "The history store (default $SPORCH_HISTORY, else $SPORCH_HOME/history.sqlite)."


def store_option(fn):
    return click.option("--store", "store", type=click.Path(dir_okay=False), default=None, help=STORE_HELP)(fn)


@click.command("history")
@click.argument("targets", nargs=-1, metavar="[POINT|DIR]... | --rebuild DIR...")
@click.option("--campaign", "campaign_filter", default=None, help="Only the points of the campaign of this name.")
@click.option("--metric", default=None,
              help="Metric to show (default step_ms_median; a generate point's stage_denoise_s_per_step).")
@click.option("--last", type=click.IntRange(min=1), default=20, show_default=True,
              help="Runs shown per point (the baseline counts the earlier ones too).")
@click.option("--k", "k", type=click.IntRange(min=1), default=DEFAULT_K, show_default=True,
              help="A run's baseline is the median of the last K runs before it.")
@click.option("--threshold", default="5%", show_default=True,
              help="Worse than the baseline by more than this marks a run (5% or 0.05).")
@click.option("--json", "as_json", is_flag=True, help="Print the trends as JSON.")
@click.option("--plot", "plot_file", type=click.Path(dir_okay=False), default=None,
              help="Also draw the trends into this PNG file (one panel per point).")
@click.option("--force", is_flag=True, help="Replace --plot if it exists (a link there is replaced, never followed).")
@store_option
@click.option("--rebuild", is_flag=True,
              help="Re-create the store from the result files of the campaign directories DIR... alone.")
def history_cmd(targets: Sequence[str], campaign_filter: Optional[str], metric: Optional[str], last: int, k: int,
                threshold: str, as_json: bool, plot_file: Optional[str], force: bool, store: Optional[str],
                rebuild: bool) -> None:
    """Each point's completed runs over time (time, git revision, torch, cluster, value, the
    rolling baseline and the ratio to it) from the history store. A POINT is a point id, a DIR
    a campaign directory (its points); none: every point (of --campaign)."""
    path = required_store_path(store)
    if rebuild:
        _rebuild(targets, path)
        return
    check_metric(metric)
    limit = parse_threshold(threshold)
    if plot_file:  # before any work: a name that is taken is refused (safe_files.check_output)
        check_output(plot_file, force, "--plot")
    with Store.open(path) as st:
        runs = _select(st, targets, campaign_filter)
    docs = [trend_doc(rs, metric, k, limit, last) for rs in histories(runs).values()]
    if plot_file:
        _plot(docs, Path(plot_file), force)
    if as_json:
        click.echo(json_text({"store": str(path), "points": docs}))
        return
    _print(docs, path, plot_file)


def _rebuild(dirs: Sequence[str], path: Path) -> None:
    if not dirs:
        raise SporchError("--rebuild needs the campaign directories to read: `sporch campaign history --rebuild "
                          "DIR...`")
    found = rebuild(dirs, path)
    con = console()
    for d, n in found.items():
        con.print(visible(f"{d}: {counted(n, 'completed run')}", one_line=True), markup=False)
    with Store.open(path) as st:
        runs, points = st.count()
    con.print(visible(f"history store {path} rebuilt: {counted(runs, 'run')} of {counted(points, 'point')}", one_line=True),
              markup=False)


def _dir_points(root: str) -> Tuple[str, List[str]]:
    """(campaign name, point ids) of a campaign directory."""
    cdir = CampaignDir(Path(root).resolve())
    ids = []
    for folder in cdir.point_dirs():
        try:
            ids.append(read_point(folder / POINT_FILE)["id"])
        except ResultFileError:
            continue
    return campaign_name(cdir), ids


def _select(st: Store, targets: Sequence[str], campaign_filter: Optional[str]) -> List[Run]:
    """The runs of the points named (ids, or campaign directories), of ``campaign_filter``; a
    one-line error for a point with no run."""
    where = f" of campaign {campaign_filter}" if campaign_filter else ""
    if not targets:
        runs = st.runs(campaign=campaign_filter)
        if not runs:
            raise SporchError(f"the history store {st.path} holds no run{where}")
        return runs
    out: List[Run] = []
    for t in targets:
        if Path(t).is_dir():
            name, ids = _dir_points(t)
            if campaign_filter and campaign_filter != name:
                raise SporchError(f"{t} is campaign {name}, not {campaign_filter}")
            runs = st.runs(point_ids=ids, campaign=name)
            if not runs:
                raise SporchError(f"the history store {st.path} holds no run of campaign {name} ({t})")
        else:
            runs = st.runs(point_ids=[t], campaign=campaign_filter)
            if not runs:
                raise SporchError(f"no run of point {t}{where} in the history store {st.path}; "
                                  "`sporch campaign history` lists the points it holds")
        out += runs
    seen, unique = set(), []
    for r in out:
        if (r.point_id, r.digest) not in seen:
            seen.add((r.point_id, r.digest))
            unique.append(r)
    return unique


def _plot(docs: List[Dict[str, Any]], path: Path, force: bool) -> None:
    import io

    if len(docs) > PLOT_POINTS:
        console(stderr=True).print(f"--plot draws the first {PLOT_POINTS} of {len(docs)} points; name the points "
                                   "to draw others", markup=False)
    png = io.BytesIO()  # drawn in memory, then written by the one rule (never through a link)
    draw_history(docs[:PLOT_POINTS], png)
    try:
        write_output(path, png.getvalue(), force=force, option="--plot")
    except OSError as exc:
        raise SporchError(f"cannot write {path} ({exc.strerror or exc})") from None


def _print(docs: List[Dict[str, Any]], path: Path, plot_file: Optional[str]) -> None:
    from rich.text import Text

    con = console()
    for doc in docs:
        shown_runs = doc["runs"]
        title = (f"{doc['id']} ({doc['campaign']}): {describe(doc['values'])} - {doc['metric']} ({doc['unit']}, "
                 f"{doc['better']} is better), {counted(doc['total_runs'], 'run')}"
                 + (f", the last {len(shown_runs)} shown" if len(shown_runs) < doc["total_runs"] else ""))
        con.print(visible(title, one_line=True), markup=False, style="bold")
        t = plain_table()
        for col in ("time (UTC)", "git", "torch", "cluster", "job", "env", doc["metric"], "baseline", "ratio"):
            t.add_column(col, justify="right" if col in (doc["metric"], "baseline", "ratio") else "left")
        for r in shown_runs:
            ratio = f"{r['ratio']:.3f}" if r["ratio"] is not None else ""
            group = r.get("fingerprint_group")
            t.add_row(r["when"], short_revision(r["git_revision"]), r["torch_version"] or "", r["cluster"] or "",
                      r["job_id"] or "", f"#{group}" if group else "", short_value(r["value"]),
                      short_value(r["baseline"]),
                      Text(visible(ratio + " worse"), style="bold red") if r["regressed"] else ratio)
        con.print(t)
        # what changed in the environment fingerprint (the env column's groups), a line per change
        for r in shown_runs:
            if r.get("changed"):
                con.print(visible(f"  {r['when']}: {'; '.join(r['changed'])}" + (" (worse)" if r["regressed"] else ""),
                                  one_line=True), markup=False)
    k, limit = docs[0]["k"], docs[0]["threshold"]
    con.print(visible(f"{counted(len(docs), 'point')}; baseline: the median of the last {k} runs before each; worse: by more "
                      f"than {limit:.1%}; store {path}" + (f"; plot {plot_file}" if plot_file else ""),
                      one_line=True), markup=False)


def report_history(directory: str, point_ids: Sequence[str], store: Optional[str]) -> Tuple[List[dict], List[str]]:
    """For ``campaign report``: record DIR's completed points, then the trends of those the
    store holds more than one run of (campaign DIR's). Returns (trends, warnings): the report
    never fails for its history."""
    warnings = [w for w in [record_quietly(directory, store)] if w]
    path = store_path(store)
    if path is None or not path.is_file() or not point_ids:
        return [], warnings
    try:
        name = campaign_name(CampaignDir(Path(directory).resolve()))
        with Store.open(path) as st:
            runs = st.runs(point_ids=sorted(set(point_ids)), campaign=name)
    except SporchError as exc:
        return [], warnings + [f"no history in the report ({exc})"]
    docs = [trend_doc(rs, None, DEFAULT_K, 0.05, REPORT_RUNS) for rs in histories(runs).values() if len(rs) > 1]
    return docs, warnings


def warn(lines: Sequence[str]) -> None:
    """Each line on stderr as ``warning: ...``, unwrapped."""
    for line in lines:
        click.echo("warning: " + visible(line, one_line=True), err=True)

