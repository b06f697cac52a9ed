"""``sporch predict``: predicted vs published seconds for the published tables."""

from __future__ import annotations

import json

import click

from sporch.orchestrator.cli.common import console, plain_table
from sporch.orchestrator.plan.published_report import published_report
from sporch.orchestrator.plan.validation import GOAL_RATIO_ERROR, leave_one_table_out, with_defaults


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
    held_out = leave_one_table_out()
    if as_json:
        defaults = {s.name: s for s in with_defaults()}
        click.echo(json.dumps([{**s.to_dict(), "defaults": defaults[s.name].to_dict()} for s in held_out], indent=2))
        return
    t = plain_table(title="leave one table out: each table predicted by a fit to the others", title_justify="left",
                    caption="err: the largest ratio error of the table, (predicted / predicted fastest) / (measured / "
                            "measured fastest) - 1; an end-to-end table (seconds per generation) is judged end to end: "
                            "encode + steps + decode; steps only: the same fit's steps alone; phases: what encode and "
                            "decode take off that error (points); not denoising: their share of the prediction of the "
                            "table's most parallel layout (--json adds each table under the shipped defaults, the fit "
                            "to all tables, which flatters)",
                    caption_justify="left")
    for col in ("table", "GPU, mode", "ordered", "err", "steps only", "phases", "not denoising"):
        t.add_column(col, justify="left" if col in ("table", "GPU, mode") else "right")
    for s in held_out:
        e2e = s.end_to_end
        t.add_row(s.name, f"{s.gpu} {'compiled' if s.compiled else 'eager'}", f"{s.ordered}/{s.pairs}",
                  f"{s.max_ratio_error:.0%}", f"{s.denoise_only_error:.0%}" if e2e else "-",
                  f"{s.explained * 100:+.0f}" if e2e else "-", f"{s.phase_share:.0%}" if e2e else "-")
    console().print(t)
    at_goal = [s for s in held_out if s.ordered == s.pairs and s.max_ratio_error <= GOAL_RATIO_ERROR]
    worst = max(held_out, key=lambda s: s.max_ratio_error)
    console().print(f"at the goal (every pair ordered, every ratio error within {GOAL_RATIO_ERROR:.0%}): "
                    f"{len(at_goal)}/{len(held_out)} tables; largest held-out ratio error {worst.max_ratio_error:.1%} "
                    f"({worst.name})", markup=False)
