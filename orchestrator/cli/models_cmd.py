"""``sporch models``: the model families sporch runs, one row each (orchestrator/plan/family_table.py);
``--wide``: also every family x every lever as the planner answers it (orchestrator/plan/lever_matrix.py)."""

from __future__ import annotations

import json
import re

import click

from sporch.orchestrator.cli.common import console, plain_table
from sporch.orchestrator.cli.terminal import echo
from sporch.orchestrator.config.cluster import find_cluster
from sporch.orchestrator.plan.lever_matrix import LEVERS, lever_matrix_of
from sporch.orchestrator.plan.family_table import family_rows


@click.command("models", short_help="The model families: classes, presets, workloads, placements, cache, LoRA.")
@click.option("--json", "as_json", is_flag=True, help="Print the rows as JSON.")
@click.option("--wide", is_flag=True, help="Every column (split plan, pipeline class, LoRA loader), and every family x "
              "lever (workloads, generate, cfg 2, text sharded, VAE parallel, shard_weights, quant, LoRA, each "
              "step cache) planned: accepted, or the planner's refusal.")
@click.option("--cluster", default="a100x8", show_default=True,
              help="The descriptor --wide plans the lever jobs on (name or YAML path).")
def models(as_json: bool, wide: bool, cluster: str) -> None:
    """The model families sporch runs: per family its diffusers classes, presets, the workloads
    and generate placements it runs, step caches and LoRA (read from the family records and the
    planner's rules). A diffusers folder of any listed class runs with model.weights=DIR.

    With --wide, each family x lever cell is a small job of the family's first published preset
    with that lever set, planned on --cluster: filled when the planner accepts it, else the
    planner's own one-line refusal (a footnote); the filled cells are counted.

    \b
    Example:
      sporch models
      sporch models --wide
      sporch models --json | jq '.[].family'
    """
    rows = family_rows()
    matrix = _matrix(cluster) if wide else None
    if as_json:
        out = [r.to_dict() for r in rows]
        if matrix is not None:
            for row, levers in zip(out, matrix):
                row["levers"] = {c.lever: (True if c.ok else c.refusal) for c in levers.cells}
        click.echo(json.dumps(out, indent=2))
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
    if matrix is not None:
        _print_matrix(matrix, cluster)


def _matrix(cluster: str):
    return lever_matrix_of(find_cluster(cluster))


def _print_matrix(matrix, cluster: str) -> None:
    """The family x lever table: "yes", or a footnote number; the footnotes below give each refusal
    once (the step caches' alike refusals of one family share one, naming its methods)."""
    notes: dict[str, int] = {}
    covers: dict[str, list[str]] = {}
    table = plain_table(title=f"levers, as the planner answers them on {cluster}")
    table.add_column("family")
    for lever in LEVERS:
        table.add_column(lever.name)
    for row in matrix:
        cells = []
        for c in row.cells:
            if c.ok:
                cells.append("yes")
                continue
            key = re.sub(r"workload\.cache\.method=\w+", "workload.cache.method", c.refusal)
            covers.setdefault(key, [])
            if c.lever not in covers[key]:
                covers[key].append(c.lever)
            cells.append(f"[{notes.setdefault(key, len(notes) + 1)}]")
        table.add_row(f"{row.family} ({row.preset})", *cells)
    out = console()
    out.print(table)
    filled = sum(c.ok for row in matrix for c in row.cells)
    total = sum(len(row.cells) for row in matrix)
    echo(f"filled: {filled} of {total} cells ({len(matrix)} families x {len(LEVERS)} levers); refused:")
    for why, n in notes.items():
        echo(f"  [{n}] {', '.join(covers[why])}: {why}", indent=6)
