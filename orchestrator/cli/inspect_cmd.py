"""``sporch inspect PATH``: a checkpoint's family, format, size, matching presets and memory."""

from __future__ import annotations

import json

import click

from sporch.orchestrator.cli.common import console, plain_table
from sporch.orchestrator.errors import SporchError
from sporch.orchestrator.plan.checkpoint_report import inspect_checkpoint


def _gib(n: int) -> str:
    return f"{n / 2**30:.3f} GiB" if n >= 2**24 else f"{n / 2**20:.2f} MiB"


@click.command("inspect")
@click.argument("path")
@click.option("--gpus", default="1,2,4,8", show_default=True,
              help="Rank counts to show the per-GPU parameter bytes for (sharded weights).")
@click.option("--json", "as_json", is_flag=True, help="Print the report as JSON.")
def inspect(path: str, gpus: str, as_json: bool) -> None:
    """What the checkpoint at PATH is: read from its config.json and safetensors headers, no tensor loaded."""
    try:
        counts = sorted({int(g) for g in gpus.split(",") if g.strip()})
    except ValueError:
        raise SporchError(f"--gpus {gpus!r} must be rank counts separated by commas, such as 1,2,4,8") from None
    if not counts or min(counts) < 1:
        raise SporchError(f"--gpus {gpus!r} must be positive rank counts, such as 1,2,4,8")
    report = inspect_checkpoint(path, counts)
    if as_json:
        click.echo(json.dumps(report, indent=2, default=str))
        return
    table = plain_table(title=f"checkpoint {report['root']}", show_header=False)
    table.add_column("key")
    table.add_column("value")
    table.add_row("family, format", f"{report['family'] or 'unknown'}, {report['format'] or 'unknown'}")
    table.add_row("config", report["config"] or "none (name the model's preset in model.preset)")
    table.add_row("files", f"{len(report['files'])} safetensors, {report['tensors']} tensors")
    table.add_row("parameters", f"{report['parameters']:,} ("
                  + ", ".join(f"{d} {n:,}" for d, n in sorted(report["dtypes"].items())) + ")")
    table.add_row("bytes", _gib(report["bytes"]))
    if report["model"]:
        table.add_row("model", ", ".join(f"{k}={v}" for k, v in report["model"].items()))
    if report.get("experts"):
        x = report["experts"]
        table.add_row("experts", f"2: transformer (high noise) and {x['second']} (low noise, same shape), "
                      f"boundary_ratio {x['boundary_ratio']:g}; parameter figures are per expert")
    if report["presets"]:
        table.add_row("presets", ", ".join(report["presets"]))
    elif report["nearest"]:
        n = report["nearest"]
        table.add_row("presets", f"none; nearest {n['preset']}, which differs in: {'; '.join(n['differences'])}")
    for label, n in report["memory_per_gpu"].items():
        table.add_row(f"parameters per GPU, {label}", _gib(n))
    console().print(table)
