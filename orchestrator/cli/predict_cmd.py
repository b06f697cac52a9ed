"""``sporch predict``: predicted vs published seconds for the published tables."""

from __future__ import annotations

import json

import click

from sporch.orchestrator.cli.common import console, plain_table
from sporch.orchestrator.plan.published_report import published_report


@click.command("predict")
@click.argument("cases", nargs=-1)
@click.option("--json", "as_json", is_flag=True, help="Print the report as JSON.")
def predict(cases: tuple[str, ...], as_json: bool) -> None:
    """The cost model against the published tables: measured, predicted (default constants) and
    fitted seconds per layout, with their errors. CASES: case names (default: every case)."""
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
