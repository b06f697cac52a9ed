"""``sporch predict``: predicted vs published seconds for the published tables."""

from __future__ import annotations

import json

import click

from sporch.orchestrator.cli.common import console, plain_table
from sporch.orchestrator.plan.published_report import published_report
from sporch.orchestrator.plan.validation import leave_one_table_out, with_defaults


@click.command("predict", short_help="The cost model against the published tables: predicted vs published seconds.")
@click.argument("cases", nargs=-1)
@click.option("--json", "as_json", is_flag=True, help="Print the report as JSON.")
@click.option("--validate", is_flag=True,
              help="Leave one table out: predict each published table from a fit to all the others.")
def predict(cases: tuple[str, ...], as_json: bool, validate: bool) -> None:
    """The cost model against the published tables: measured, predicted (default constants) and
    fitted seconds per layout, with their errors. CASES: case names (default: every case).
    With --validate: per table, the pairs measured over 10% apart that a fit to the other tables
    orders rightly, and its largest step-time ratio error against the table's fastest point."""
    if validate:
        _validate(as_json)
        return
    report = published_report(list(cases) or None)
    if as_json:
        click.echo(json.dumps(report, indent=2))
        return
    con = console()
    for case in report:
        title = f"{case['name']}" + ("" if case["checked"] else " (not checked: the model cannot order it)")
        t = plain_table(title=title, title_justify="left", caption=case["source"], caption_justify="left")
        for col in ("layout", "published s", "predicted s", "error", "fitted s", "error after fit"):
            t.add_column(col, justify="left" if col == "layout" else "right")
        for r in case["rows"]:
            t.add_row(r["layout"], f"{r['measured_s']:.4g}", f"{r['predicted_s']:.4g}", f"{r['error']:+.0%}",
                      f"{r['fitted_s']:.4g}", f"{r['fitted_error']:+.1%}")
        con.print(t)


def _validate(as_json: bool) -> None:
    held_out, defaults = leave_one_table_out(), {s.name: s for s in with_defaults()}
    if as_json:
        click.echo(json.dumps([{**s.to_dict(), "defaults": defaults[s.name].to_dict()} for s in held_out], indent=2))
        return
    t = plain_table(title="leave one table out: each table predicted by a fit to the others", title_justify="left",
                    caption="ratio error: (predicted / predicted fastest) / (measured / measured fastest) - 1, the "
                            "largest of the table; defaults: the shipped fit to all tables (flatters)",
                    caption_justify="left")
    for col in ("table", "gpu", "mode", "ordered", "max ratio err", "defaults: ordered", "err"):
        t.add_column(col, justify="left" if col in ("table", "gpu", "mode") else "right")
    for s in held_out:
        d = defaults[s.name]
        t.add_row(s.name, s.gpu, "compiled" if s.compiled else "eager", f"{s.ordered}/{s.pairs}",
                  f"{s.max_ratio_error:.0%}", f"{d.ordered}/{d.pairs}", f"{d.max_ratio_error:.0%}")
    console().print(t)
