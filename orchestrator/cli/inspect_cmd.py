"""``sporch inspect PATH``: a checkpoint's family, format, size, matching presets and memory per
GPU under each placement option; or a LoRA file's format, ranks, alphas and targets.

For a folder of a class whose split plan sporch derives, the derived plan and its verdict come
from the cache (``models/families/derived_plans.py``); when none is cached for this diffusers yet,
one process derives and checks it first (``python -m sporch.runtime.derive_check CLASS``: the
orchestrator imports no torch), as ``sporch decode`` runs ``python -m sporch.runtime.decode``."""

from __future__ import annotations

import json
import subprocess
import sys

import click

from sporch.orchestrator.cli.common import console, plain_table
from sporch.orchestrator.config.cluster import find_cluster
from sporch.orchestrator.models.checkpoint_files import CheckpointError
from sporch.orchestrator.models.families.derived_plans import unwritable, verdict_report
from sporch.orchestrator.models.lora_report import describe_lora, is_lora
from sporch.orchestrator.errors import SporchError
from sporch.orchestrator.plan.checkpoint_report import inspect_checkpoint


def _gib(n: int) -> str:
    return f"{n / 2**30:.3f} GiB" if n >= 2**24 else f"{n / 2**20:.2f} MiB"


@click.command("inspect",
               short_help="What a checkpoint (presets, memory per GPU by placement) or a LoRA file (targets) is.")
@click.argument("path")
@click.option("--gpus", default="1,2,4,8", show_default=True,
              help="GPU counts to show the memory per GPU for (sharded weights, placement options).")
@click.option("--cluster", "cluster_name", default="h100x64", show_default=True,
              help="Cluster whose GPUs and links the placement estimates are for.")
@click.option("--json", "as_json", is_flag=True, help="Print the report as JSON.")
def inspect(path: str, gpus: str, cluster_name: str, as_json: bool) -> None:
    """What the checkpoint or LoRA file at PATH is: read from its config.json and safetensors
    headers, no tensor loaded."""
    try:
        lora = is_lora(path)
    except CheckpointError as exc:
        raise SporchError(str(exc)) from None
    if lora:
        _show_lora(path, as_json)
        return
    try:
        counts = sorted({int(g) for g in gpus.split(",") if g.strip()})
    except ValueError:
        raise SporchError(f"--gpus {gpus!r} must be rank counts separated by commas, such as 1,2,4,8") from None
    if not counts or min(counts) < 1:
        raise SporchError(f"--gpus {gpus!r} must be positive rank counts, such as 1,2,4,8")
    report = _with_verdict(inspect_checkpoint(path, counts, find_cluster(cluster_name)))
    if as_json:
        click.echo(json.dumps(report, indent=2, default=str))
        return
    table = plain_table(title=f"checkpoint {report['root']}", show_header=False)
    table.add_column("key")
    table.add_column("value")
    if report.get("config_note"):  # a config.json sporch does not run: its reason, no guess
        table.add_row("family, format", "not supported")
        table.add_row("config", report["config_note"])
    else:
        table.add_row("family, format", f"{report['family'] or 'unknown'}, {report['format'] or 'unknown'}")
        table.add_row("config", report["config"] or "none (name the model's preset in model.preset)")
    table.add_row("files", f"{len(report['files'])} safetensors, {report['tensors']} tensors")
    table.add_row("parameters", f"{report['parameters']:,} ("
                  + ", ".join(f"{d} {n:,}" for d, n in sorted(report["dtypes"].items())) + ")")
    table.add_row("bytes", _gib(report["bytes"]))
    if report["model"]:
        table.add_row("model", ", ".join(f"{k}={v}" for k, v in report["model"].items()))
    if report.get("generic"):
        g = report["generic"]
        table.add_row("class", f"family {g['family']}, class {g['class']} (split plan: {g['split_plan']}); "
                      f"{g['heads']} heads (kv {g['kv_heads']}), {g['layers']} layers")
        table.add_row("layouts", "; ".join(f"{n} GPU(s): {', '.join(ls) or 'none'}" for n, ls in g["layouts"].items()))
        if g.get("derived"):
            _derived_rows(table, g["derived"])
    if report.get("experts"):
        x = report["experts"]
        table.add_row("experts", f"2: transformer (high noise) and {x['second']} (low noise, same shape), "
                      f"boundary_ratio {x['boundary_ratio']:g}; parameter figures are per expert")
    if report.get("expand_timesteps"):
        table.add_row("timesteps", "one per token (Wan2.2 TI2V: model_index.json expand_timesteps)")
    if report["presets"]:
        table.add_row("presets", ", ".join(report["presets"]))
    elif report["nearest"]:
        n = report["nearest"]
        table.add_row("presets", f"none; nearest {n['preset']}, which differs in: {'; '.join(n['differences'])}")
    for label, n in report["memory_per_gpu"].items():
        table.add_row(f"parameters per GPU, {label}", _gib(n))
    console().print(table)
    _show_placements(report.get("placements"))


#: The runtime module that derives and checks a split plan, run as its own process.
DERIVE_CHECK = "sporch.runtime.derive_check"


def _with_verdict(report: dict) -> dict:
    """The report with the derived plan's verdict, derived and checked now when none is cached."""
    g = report.get("generic") or {}
    derived = g.get("derived")
    if not derived or derived["checked"]:
        return report
    blocked = unwritable()
    if blocked:
        derived["error"] = blocked
        return report
    click.echo(f"{g['class']}: its split plan is derived; deriving it and checking it against the unsharded class on "
               f"2 and 4 gloo ranks (once per diffusers version, cached in {derived['cache']}) ...", err=True)
    done = subprocess.run([sys.executable, "-m", DERIVE_CHECK, "--", g["class"]], capture_output=True, text=True)
    g["derived"] = verdict_report(g["class"])
    if not g["derived"]["checked"]:  # e.g. no torch here: said, not fatal (the ranks check before first use)
        last = (done.stderr.strip().splitlines() or ["no output"])[-1]
        g["derived"]["error"] = f"deriving and checking it here failed (exit code {done.returncode}): {last}"
    return report


def _derived_rows(table, d: dict) -> None:
    if not d["checked"]:
        table.add_row("split plan (derived)", f"not checked yet: {d.get('error', 'no verdict cached')}; the ranks "
                      f"derive and check it before they use it (cache {d['cache']})")
        return
    if d["exact"]:
        errs = ", ".join(f"{e:.2g} on {n} ranks" for n, e in sorted(d["errors"].items()))
        verdict = (f"exact: max relative error {errs} (tolerance {d['tolerance']:g}; "
                   f"{d['tokens'][0]} image + {d['tokens'][1]} text tokens, layouts {', '.join(d['layouts'])})")
    else:
        verdict = d["refusal"]
    table.add_row("split plan (derived)", "; ".join(d["entries"]) or "none")
    table.add_row("verdict", f"{verdict}; cached in {d['cache']} (diffusers {d['diffusers_version']}; delete it to "
                  "derive and check again)")


def _show_placements(p) -> None:
    if not p:
        return
    if "note" in p:
        click.echo(f"memory per GPU by placement: not estimated ({p['note']})")
        return
    w = p["workload"]
    size = f"{w['frames']} x {w['height']} x {w['width']}" if w["frames"] > 1 else f"{w['height']} x {w['width']}"
    table = plain_table(title=f"memory per GPU (GiB; * = does not fit) by placement: {w.get('kind', 'generate')} {size}, "
                              f"guidance {w['guidance_scale']:g}, {w['dtype']}, on {p['cluster']} "
                              f"({p['gpu_memory_gib']:g} GiB GPUs)")
    table.add_column("placement")
    for n in p["gpus"]:
        table.add_column(f"{n} GPU" + ("s" if n > 1 else ""), justify="right")
    for row in p["rows"]:
        cells = [row["per_gpu"][n] for n in p["gpus"]]
        table.add_row(row["option"], *(f"{c['gib']:.2f}" + ("" if c["fits"] else "*") for c in cells))
    console().print(table)
    if p["skipped_gpus"]:
        click.echo(f"skipped GPU counts {p['skipped_gpus']}: not part of a node nor whole nodes of {p['cluster']}")


def _show_lora(path: str, as_json: bool) -> None:
    try:
        report = describe_lora(path)
    except CheckpointError as exc:
        raise SporchError(str(exc)) from None
    if as_json:
        click.echo(json.dumps(report, indent=2))
        return
    table = plain_table(title=f"LoRA {report['path']}", show_header=False)
    table.add_column("key")
    table.add_column("value")
    table.add_row("architecture", f"{report['architecture'] or 'unknown'} ({report['matched']} of {report['modules']} "
                  f"modules match its {report['names'] or '?'} names)")
    table.add_row("format", f"{report['format']} ({report['key_style']} keys)")
    alphas = ", ".join("none (= rank)" if a is None else f"{a:g}" for a in report["alphas"])
    table.add_row("rank, alpha", f"rank {', '.join(map(str, report['ranks']))}; alpha {alphas}; "
                  f"alpha/rank {', '.join(f'{f:g}' for f in report['factors'])}")
    table.add_row("parameters", f"{report['parameters']:,} ({', '.join(f'{n} {d}' for d, n in report['dtypes'].items())} tensors)")
    table.add_row(f"targets ({report['modules']})", ", ".join(report["targets"]))
    if report["diffusers_modules"]:
        table.add_row("diffusers modules", ", ".join(report["diffusers_modules"]))
    console().print(table)
