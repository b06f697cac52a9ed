"""``sporch campaign``: plan a sweep, report on its results, compare two campaigns."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Optional

import click

from sporch.orchestrator.campaign.collect import UNREADABLE, Row, collect, columns, has_metric, short_value
from sporch.orchestrator.campaign.compare import Change, compare, parse_threshold
from sporch.orchestrator.campaign.folder import CampaignDir
from sporch.orchestrator.campaign.history_baseline import compare_to_baseline
from sporch.orchestrator.campaign.history_store import Store, required_store_path
from sporch.orchestrator.campaign.history_trends import DEFAULT_K
from sporch.orchestrator.campaign.metrics import BY_NAME, PREDICTED_METRICS
from sporch.orchestrator.campaign.published_points import published_rows
from sporch.orchestrator.campaign.reference_checks import checks, counts
from sporch.orchestrator.campaign.report import build_report
from sporch.orchestrator.campaign.report_cells import published_cells
from sporch.orchestrator.campaign.report_files import CSV_FILE, HTML_FILE, PLOT_DATA_FILE
from sporch.orchestrator.cli.campaign_history_cmd import history_cmd, report_history, store_option, warn
from sporch.orchestrator.cli.campaign_plan_cmd import plan_cmd
from sporch.orchestrator.cli.campaign_run_cmd import run_cmd, status_cmd
from sporch.orchestrator.cli.campaign_views import metric_text, phases_table
from sporch.orchestrator.cli.common import console, plain_table
from sporch.orchestrator.cli.terminal import shown, visible
from sporch.orchestrator.contract.numbers import counted
from sporch.orchestrator.errors import SporchError

#: Exit code when a reference fails (report) or a metric regressed (compare).
EXIT_FAILED = 1


@click.group("campaign", short_help="Benchmark campaigns: plan a sweep, report, compare.")
def campaign() -> None:
    """Benchmark campaigns: one YAML sweep -> job arrays -> report (docs/campaigns.md)."""


@campaign.command("report")
@click.argument("directory", metavar="DIR", type=click.Path(file_okay=False))
@click.option("--out", "out_dir", default=None, type=click.Path(file_okay=False),
              help="Where table.csv, the PNG plots, plots.json and report.html go (default: DIR/report).")
@click.option("--force", is_flag=True, help="Write into --out even when it holds files that are not a report.")
@click.option("--wide", is_flag=True, help="The terminal table with every column (default: the few that fit 80 columns).")
@store_option
def report_cmd(directory: str, out_dir: Optional[str], force: bool, store: Optional[str], wide: bool) -> None:
    """Table (terminal + CSV), plots and an HTML page from DIR's result files; exit 1 when a
    reference fails. DIR's completed points are recorded in the history store; the page shows
    the history of those it holds more than one run of."""
    from rich.text import Text

    rows = collect(directory)
    if not rows:
        raise SporchError(f"{directory} has no campaign points (points/<id>/point.json); run the campaign first")
    folder = Path(out_dir) if out_dir else CampaignDir(Path(directory)).report
    if out_dir:
        check_report_folder(folder, force)
    history, warnings = report_history(directory, [r.id for r in rows if r.ok], store)
    warn(warnings)
    published = published_rows(directory, rows)
    files = build_report(rows, folder, title=f"campaign {Path(directory).resolve().name}", history=history,
                         published=published)
    con = console()
    hidden = {"step_ms_p90", "ideal_ms_per_step", "comm_bytes_per_step", "nodes", "stage_load_s",
              "stage_load_peak_memory_gib", "stage_save_peak_memory_gib", *(m.name for m in PREDICTED_METRICS)}
    same = {c: rows[0].cell(c) for c in ("cluster", "preset", "shape", "dtype", "status")
            if len({str(r.cell(c)) for r in rows}) == 1}
    visible_cols = [c for c in columns(rows) if c not in hidden and c not in same and _shown(c, rows)]
    if not wide:
        visible_cols = [c for c in visible_cols if _narrow(c, rows)]
    table = plain_table(title=f"{len(rows)} points" + "".join(f", {k} {v}" for k, v in same.items())
                        + ("" if wide else " (--wide: every column; all in table.csv)"), title_justify="left")
    for c in visible_cols:
        table.add_column(_header(c) if wide else NARROW_HEADERS.get(c, _header(c)),
                         justify="left" if c in ("id", "layout", "preset", "shape") else "right")
    style = {"pass": "green", "fail": "bold red"}
    for r in rows:
        cells = []
        for c in visible_cols:
            text = metric_text(c, r.cell(c))
            verdict = r.verdict if c == "reference" else r.verdicts.get(c)
            cells.append(Text(visible(text, one_line=True), style=style[verdict]) if verdict in style else text)
        table.add_row(*cells)
    con.print(table)
    phases = phases_table(rows)  # a generate campaign: each phase measured beside its prediction
    if phases is not None:
        con.print(phases)
    found = checks(rows)
    if found:
        con.print(_references_table(found, con.width))
    failed = [(r, m) for r in rows for m, v in r.verdicts.items() if v == "fail"]
    for r, m in failed:
        measured = r.metrics.get(m)
        con.print("[red]reference failed[/] " + shown(
                  f"{r.id} ({r.values['layout']}, {r.values['gpus']} GPUs): {m} = "
                  f"{short_value(measured) if measured is not None else 'missing'}, "
                  f"expected {r.bounds[m].text()}"))
    for r in rows:
        if r.status == UNREADABLE:
            con.print(f"unreadable: {r.id}: {r.error}", markup=False)
        elif r.output_note:
            con.print(visible(f"same output: {r.id} ({r.values['layout']}): {r.output_note}", one_line=True),
                      markup=False)
    if published:
        con.print(_published_table(published))
    not_done = [r for r in rows if not r.ok]
    if not_done:
        con.print(f"{counted(len(not_done), 'point')} not completed: "
                  + visible(", ".join(f"{r.id} {r.status}" for r in not_done[:10]), one_line=True), markup=False)
    con.print(visible(f"report: {files['html']} (table {files['csv']}, plots in {folder}"
                      + (f", history of {counted(len(history), 'point')}" if history else "") + ")", one_line=True),
              markup=False)
    if failed:
        click.get_current_context().exit(EXIT_FAILED)


def check_report_folder(folder: Path, force: bool) -> None:
    """``--out FOLDER``: new, empty, or an earlier report (its report.html, table.csv and
    plots.json); a folder holding other files is refused unless ``force`` (a report replaces
    files of its own names there, never through a link)."""
    if not folder.exists() and not folder.is_symlink():
        return
    if not folder.is_dir():
        raise SporchError(f"--out {folder} exists and is not a folder; name a folder")
    names = {p.name for p in folder.iterdir()}
    if names and not {HTML_FILE, CSV_FILE, PLOT_DATA_FILE} <= names and not force:
        raise SporchError(f"--out {folder} holds files and is not an earlier report; pass --force to write the "
                          "report's files into it, or name a new folder")


def _published_table(published: list[dict]) -> Any:
    """Points that repeat a published measurement: published, predicted (error), measured."""
    t = plain_table(title="published measurements (seconds per generation; measured: steps x median step)",
                    title_justify="left")
    for c in ("id", "layout", "case", "published s", "predicted s", "error", "measured denoise s"):
        t.add_column(c, justify="left" if c in ("id", "layout", "case") else "right")
    for p in map(published_cells, published):
        t.add_row(p["id"], visible(str(p["layout"]), one_line=True), p["case"], p["published_text"],
                  p["predicted_text"], p["error_text"], p["measured_text"])
    return t


#: The terminal report's columns without --wide (fit 80 columns): the point, its step time, memory
#: and the model's error, every stage's seconds, whatever a reference judges, and the keys that vary.
NARROW = ("id", "cluster", "gpus", "layout", "preset", "shape", "dtype", "cache", "status", "step_ms_median",
          "peak_memory_gib", "prediction_error", "reference")
NARROW_HEADERS = {"step_ms_median": "step ms", "peak_memory_gib": "GiB", "prediction_error": "pred err",
                  "reference": "ref"}


def _narrow(column: str, rows: list[Row]) -> bool:
    """Whether the default (narrow) terminal table keeps ``column``."""
    if column in NARROW:
        return True
    if column == "repeat":
        return any(r.values.get("repeat") for r in rows)
    if any(column in r.bounds for r in rows):  # a reference judges it
        return True
    return column.startswith("stage_") and column.endswith("_s")


def _shown(column: str, rows: list[Row]) -> bool:
    """Whether the terminal table shows ``column``: a metric only when some row has it or a
    reference for it (a generate campaign has no step times); table.csv and report.html keep
    every step metric."""
    return column not in BY_NAME or any(has_metric(r, column) for r in rows)


def _header(column: str) -> str:
    """A terminal column's header: a stage metric without its prefix, its peak memory as GiB
    (``stage_decode_peak_memory_gib`` -> ``decode GiB``)."""
    if column.startswith("stage_"):
        column = column[len("stage_"):].replace("peak_memory_gib", "GiB")
    return column.replace("_", " ")


@campaign.command("compare")
@click.argument("old_dir", metavar="A", type=click.Path(file_okay=False))
@click.argument("new_dir", metavar="[B]", type=click.Path(file_okay=False), required=False)
@click.option("--threshold", default="5%", show_default=True,
              help="Relative change that counts as a regression (5% or 0.05).")
@click.option("--baseline", is_flag=True,
              help="Compare the one directory given with each point's baseline in the history store: the "
                   "median of its last K runs before this one.")
@click.option("--k", "k", type=click.IntRange(min=1), default=None,
              help=f"With --baseline: runs the baseline is the median of (default {DEFAULT_K}).")
@store_option
def compare_cmd(old_dir: str, new_dir: Optional[str], threshold: str, baseline: bool, k: Optional[int],
                store: Optional[str]) -> None:
    """Points whose metrics got worse from campaign A to campaign B, or with --baseline from
    their history's baseline to campaign A; exit 1 on any."""
    limit = parse_threshold(threshold)
    if baseline:
        if new_dir is not None:
            raise SporchError("--baseline compares one campaign directory with its history: "
                              "`sporch campaign compare --baseline DIR`")
        _compare_baseline(old_dir, limit, k or DEFAULT_K, store)
        return
    if new_dir is None:
        raise SporchError("compare needs two campaign directories, A B (or one with --baseline)")
    if k is not None or store is not None:
        raise SporchError("--k and --store go with --baseline")
    changes, compared = compare(old_dir, new_dir, limit)
    if not compared:  # a gate that compared nothing must not pass
        raise SporchError(f"no point completed in both {old_dir} and {new_dir}, so nothing was compared; compare "
                          "two runs of the same campaign (the same point ids), each with completed points")
    con = console()
    if not changes:
        con.print(visible(f"no regression over {limit:.1%} in {counted(compared, 'point')} completed in both "
                          "campaigns", one_line=True), markup=False)
        return
    _changes_table(con, changes, f"({compared} points compared)", limit, ("A", "B"))
    click.get_current_context().exit(EXIT_FAILED)


def _compare_baseline(directory: str, limit: float, k: int, store: Optional[str]) -> None:
    path = required_store_path(store)
    with Store.open(path) as st:
        result = compare_to_baseline(directory, st, k, limit)
    con = console()
    against = f"the baseline (median of the last {k} earlier runs)"
    lacking = (f"; {counted(len(result.without), 'point')} without an earlier run" if result.without else "")
    if not result.compared:
        con.print(visible(f"no point of {directory} has an earlier run of campaign {result.campaign} in the history "
                          f"store {path}: nothing to compare", one_line=True), markup=False)
        return
    if not result.changes:
        con.print(visible(f"no regression over {limit:.1%} against {against} in {counted(result.compared, 'point')}{lacking}",
                          one_line=True), markup=False)
        return
    _changes_table(con, result.changes, f"against {against}, {result.compared} points compared{lacking}", limit,
                   ("baseline", "run"))
    click.get_current_context().exit(EXIT_FAILED)


def _changes_table(con, changes: list[Change], note: str, limit: float, labels: tuple[str, str]) -> None:
    """The regressions as a table: one row per point and metric, ``labels`` naming the old and new columns."""
    old, new = labels
    broken = sum(1 for ch in changes if ch.broken)
    t = plain_table(title=f"{counted(len(changes) - broken, 'regression')} over {limit:.1%}"
                    + (f", {counted(broken, 'metric')} missing or not finite in {'the run' if new == 'run' else new}"
                       if broken else "") + f" {note}",
                    title_justify="left")
    for col in ("id", "gpus", "layout", "shape", "metric", old, new, "change"):
        t.add_column(col)
    for ch in changes:
        v = ch.values
        t.add_row(ch.id, str(v.get("gpus", "")), str(v.get("layout", "")), str(v.get("shape", "")), ch.metric,
                  short_value(ch.old), "missing" if ch.new is None else short_value(ch.new),
                  "broken" if ch.broken else f"{ch.relative:+.1%}")
    con.print(t)
    # what changed besides the plan (result.json's fingerprint), one line per point
    seen: set[str] = set()
    for ch in changes:
        if ch.id in seen or not ch.fingerprinted:
            continue
        seen.add(ch.id)
        what = "; ".join(ch.changed) if ch.changed else "nothing in the fingerprint"
        con.print(visible(f"changed: {ch.id} ({ch.values.get('layout', '')}): {what}", one_line=True), markup=False)


campaign.add_command(plan_cmd)
campaign.add_command(run_cmd)
campaign.add_command(status_cmd)
campaign.add_command(history_cmd)


def _references_table(found, width: int) -> Any:
    """Every reference check: the point, the reference (and its band, where the terminal has the
    room), the measured value, its ratio to the reference, the verdict (``reference_checks``).
    The metric is in the title when every check is of one metric; nothing is cut at 80 columns."""
    from rich.text import Text

    n = counts(found)
    metrics = sorted({c.metric for c in found})
    title = (f"references{'' if len(metrics) > 1 else ' (' + metrics[0] + ')'}: {n['pass']} passed, {n['fail']} failed"
             + (f", {n['pending']} not run yet" if n["pending"] else ""))
    cols = ["id", "layout", *(["metric"] if len(metrics) > 1 else []), "reference",
            *(["band"] if width >= 110 else []), "measured", "ratio", "verdict"]
    t = plain_table(title=title, title_justify="left")
    for col in cols:
        t.add_column(col, justify="right" if col in ("reference", "measured", "ratio") else "left", no_wrap=True)
    style = {"pass": "green", "fail": "bold red"}
    for c in found:
        cell = {"id": c.id, "layout": c.layout, "metric": c.metric,
                "reference": f"{c.reference:g} {BY_NAME[c.metric].unit}", "band": c.band.split("(", 1)[-1].rstrip(")"),
                "measured": short_value(c.measured) if c.measured is not None else "-",
                "ratio": f"{c.ratio:.3g}x" if c.ratio is not None else "-",
                "verdict": Text(c.verdict, style=style.get(c.verdict, ""))}
        t.add_row(*(cell[k] for k in cols))
    return t
