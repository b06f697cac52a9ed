"""``sporch models``: the model families sporch runs, one row each (orchestrator/plan/family_table.py)."""

from __future__ import annotations

import json

import click

from sporch.orchestrator.cli.common import console, plain_table
from sporch.orchestrator.plan.family_table import family_rows


@click.command("models", short_help="The model families: classes, presets, workloads, placements, cache, LoRA.")
@click.option("--json", "as_json", is_flag=True, help="Print the rows as JSON.")
@click.option("--wide", is_flag=True, help="Every column (split plan, pipeline class, LoRA loader).")
def models(as_json: bool, wide: bool) -> None:
    """The model families sporch runs: per family its diffusers classes, presets, the workloads
    and generate placements it runs, step caches and LoRA (read from the family records and the
    planner's rules). A diffusers folder of any listed class runs with model.weights=DIR.

    \b
    Example:
      sporch models
      sporch models --json | jq '.[].family'
    """
    rows = family_rows()
    if as_json:
        click.echo(json.dumps([r.to_dict() for r in rows], indent=2))
        return
    table = plain_table(title="model families", show_lines=True)
    columns = ["family", "presets", "workloads", "generate placements", "cache", "LoRA"]
    if wide:
        columns[1:1] = ["classes (split plan)"]
        columns.insert(-2, "pipeline")
    for col in columns:
        table.add_column(col)
    for r in rows:
        cells = {
            "family": r.family,
            "classes (split plan)": r.split_plan,
            "presets": ", ".join(r.presets) or "- (model.weights=DIR)",
            "workloads": ", ".join(r.workloads),
            "pipeline": r.pipeline or "-",
            "generate placements": (f"cfg {r.cfg}; text {'/'.join(r.text_encoder)}; VAE {'/'.join(r.vae)}"
                                    if r.pipeline else "-"),
            "cache": "; ".join(part for part in (", ".join(r.cache), r.cache_refusal) if part) or "-",
            "LoRA": ("yes" if r.lora else "no") if not wide else (r.lora or "no"),
        }
        table.add_row(*(cells[c] for c in columns))
    console().print(table)
