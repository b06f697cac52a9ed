"""The campaign report: CSV table, plots (PNG + their data in plots.json), one HTML page.

Plots (data first, :func:`plot_data`, then drawn from that data, :func:`draw_plots`):

- ``latency_vs_gpus``: median step time against GPU count, one series per workload and
  layout family (dp, cfg and ulysses fixed; ring grows with the GPUs);
- ``scaling_efficiency``: for the best layout at each size, ``T(n0) n0 / (T(n) n)`` against
  the ideal linear scaling (1.0);
- ``comm_vs_compute``: time in collectives and the rest of the step, per point;
- ``best_layout``: the fastest layout at each size, per workload;
- ``same_output`` (only when generate points were compared, :mod:`.outputs`): per point the
  PSNR of its decoded frames against the reference point (identical frames drawn at
  ``SAME_OUTPUT_CAP`` dB and labelled "identical"), and its latents' max abs error.
- ``speed_vs_psnr`` (when two or more points have a time and a PSNR): each point's denoise
  seconds against its PSNR, the Pareto-optimal ones (:mod:`.pareto`) starred and joined.

Repeats of a point are combined by the median of their step medians.

With a history (:mod:`.history_store`: points the store holds more than one run of), the page also
gets a history section: per point its runs' values, rolling baseline and ratio, and a small
plot (:func:`draw_history`); ``history.json`` holds that data.
"""

from __future__ import annotations

import base64
import csv
import json
import math
import io
import statistics
from collections import defaultdict
from pathlib import Path
from typing import Any, Callable, Sequence

from sporch.orchestrator.campaign import pareto, summary
from sporch.orchestrator.campaign.collect import (KEY_COLUMNS, LEVER_COLUMNS, Row, columns, format_value,
                                                  short_value)
from sporch.orchestrator.campaign.metrics import CACHE_METRICS, OUTPUT_METRICS, STAGE_METRICS
from sporch.orchestrator.campaign.reference_checks import Check, checks, counts
from sporch.orchestrator.contract.plan import Layout
from sporch.orchestrator.safe_files import write_atomic
from sporch.orchestrator.errors import SporchError
from sporch.orchestrator.paths import templates_dir

PLOTS = ("latency_vs_gpus", "scaling_efficiency", "comm_vs_compute", "best_layout")
#: Drawn only when some point has output metrics.
SAME_OUTPUT = "same_output"
#: Drawn when at least two points have a time and a PSNR (.pareto): speed against quality.
SPEED_QUALITY = "speed_vs_psnr"
#: Where an infinite PSNR (identical frames) is drawn.
SAME_OUTPUT_CAP = 100.0
#: Drawn when the points have what they need: the cost model against the measurement, and the
#: stages of generate points.
PREDICTED = "predicted_vs_measured"
STAGES = "stage_seconds"
CSV_FILE = "table.csv"
PLOT_DATA_FILE = "plots.json"
HTML_FILE = "report.html"
HTML_TEMPLATE = "campaign_report.html.j2"
HISTORY_FILE = "history.json"
#: Points whose history the page shows (those with a regressed last run first).
HISTORY_POINTS = 50


def _write_text(path: Path, text: str) -> Path:
    """A temporary file beside ``path``, then a rename (safe_files): a failure half-way
    (a full disk) leaves the old file or none, never a half-written one or a followed link."""
    return write_atomic(path, text, fsync=False)


def write_csv(rows: list[Row], path: Path) -> Path:
    fh = io.StringIO(newline="")
    w = csv.writer(fh)
    cols = columns(rows)
    w.writerow(cols)
    for r in rows:
        w.writerow([format_value(r.cell(c)) for c in cols])
    return _write_text(path, fh.getvalue())


def _workload(row: Row) -> tuple[str, ...]:
    """(cluster, preset, shape, dtype, cache) of a row; a cluster given as a file is named by its stem."""
    v = row.values
    cluster = str(v["cluster"])
    if cluster.endswith((".yaml", ".yml")):
        cluster = Path(cluster).stem
    return (cluster, str(v["preset"]), str(v["shape"]), str(v["dtype"]),
            *(str(v.get(k) or "") for k in LEVER_COLUMNS))


def _namer(workloads) -> Callable[[tuple[str, ...]], str]:
    """Names for workloads: only the parts that differ between them (all parts for one)."""
    workloads = list(workloads)
    varying = [i for i in range(len(workloads[0]))
               if len({w[i] for w in workloads}) > 1] if workloads else []
    return lambda wl: " ".join(wl[i] for i in varying) or " ".join(p for p in wl if p)


def _family(layout: str) -> str:
    lay = Layout.from_name(layout)
    parts = ([f"dp{lay.dp}"] if lay.dp != 1 else []) + ([f"cfg{lay.cfg}"] if lay.cfg != 1 else []) + [f"ulysses{lay.ulysses}"]
    return " ".join(parts)


def _plottable(values: dict) -> bool:
    """Whether a row's GPU count and layout can place it on a plot (a hand-edited point.json
    may hold anything)."""
    gpus, layout = values.get("gpus"), values.get("layout")
    if not (isinstance(gpus, int) and not isinstance(gpus, bool) and gpus > 0 and isinstance(layout, str)):
        return False
    try:
        Layout.from_name(layout)
    except ValueError:
        return False
    return True


def _combined(rows: list[Row]) -> dict[tuple[str, int, str], dict[str, float]]:
    """(workload, gpus, layout) -> median over repeats of step and collective times."""
    acc: dict[tuple[str, int, str], dict[str, list[float]]] = defaultdict(lambda: defaultdict(list))
    for r in rows:
        step = r.metrics.get("step_ms_median")
        if not r.ok or step is None or not math.isfinite(step) or not _plottable(r.values):
            continue
        key = (_workload(r), int(r.values["gpus"]), str(r.values["layout"]))
        acc[key]["step_ms"].append(step)
        if r.metrics.get("comm_ms_per_step") is not None and math.isfinite(r.metrics["comm_ms_per_step"]):
            acc[key]["comm_ms"].append(r.metrics["comm_ms_per_step"])
    return {k: {m: statistics.median(v) for m, v in d.items()} for k, d in sorted(acc.items())}


def plot_data(rows: list[Row]) -> dict[str, Any]:
    """The series every plot draws (what plots.json holds)."""
    comb = _combined(rows)
    latency: dict[str, dict[str, list]] = defaultdict(lambda: {"x": [], "y": [], "layout": []})
    best: dict[str, dict[int, tuple[float, str]]] = defaultdict(dict)
    comm: dict[str, list] = {"labels": [], "comm_ms": [], "compute_ms": []}
    many = len({k[0] for k in comb}) > 1
    name = _namer({k[0] for k in comb})
    for (workload, gpus, layout), m in comb.items():
        wl = name(workload)
        label = f"{wl} | {_family(layout)}" if many else _family(layout)
        s = latency[label]
        s["x"].append(gpus)
        s["y"].append(m["step_ms"])
        s["layout"].append(layout)
        if gpus not in best[wl] or m["step_ms"] < best[wl][gpus][0]:
            best[wl][gpus] = (m["step_ms"], layout)
        if "comm_ms" in m:
            comm["labels"].append(f"{wl + ' ' if many else ''}{gpus} GPUs {layout}")
            comm["comm_ms"].append(m["comm_ms"])
            comm["compute_ms"].append(max(m["step_ms"] - m["comm_ms"], 0.0))
    best_series: dict[str, dict[str, list]] = {}
    eff: dict[str, dict[str, list]] = {}
    for wl, by_gpus in best.items():
        xs = sorted(by_gpus)
        best_series[wl] = {"x": xs, "y": [by_gpus[g][0] for g in xs], "layout": [by_gpus[g][1] for g in xs]}
        n0, t0 = xs[0], by_gpus[xs[0]][0]
        eff[wl] = {"x": xs, "y": [t0 * n0 / (by_gpus[g][0] * g) for g in xs]}
    out = {
        "latency_vs_gpus": {"series": dict(latency), "xlabel": "GPUs", "ylabel": "step time, median (ms)"},
        "scaling_efficiency": {"series": eff, "ideal": 1.0, "xlabel": "GPUs",
                               "ylabel": "scaling efficiency, best layout (fraction of linear)"},
        "comm_vs_compute": {**comm, "ylabel": "ms per step"},
        "best_layout": {"series": best_series, "xlabel": "GPUs", "ylabel": "best step time, median (ms)"},
    }
    same = _same_output(rows)
    if same is not None:
        out[SAME_OUTPUT] = same
    speed = _speed_vs_quality(rows)
    if speed is not None:
        out[SPEED_QUALITY] = speed
    predicted = _predicted_vs_measured(rows)
    if predicted is not None:
        out[PREDICTED] = predicted
    stages = _stage_bars(rows)
    if stages is not None:
        out[STAGES] = stages
    return out


def _lever_label(r: Row) -> str:
    """A point in words on the speed/quality plot: its layout and the levers it sets."""
    levers = [f"{k} {r.values[k]}" for k in LEVER_COLUMNS if r.values.get(k) not in (None, "")]
    return " ".join([str(r.values.get("layout"))] + levers)


def _speed_vs_quality(rows: list[Row]) -> dict[str, Any] | None:
    """Per compared point its time (s) and PSNR (dB; identical: drawn at SAME_OUTPUT_CAP), and
    whether it is Pareto-optimal (.pareto)."""
    pts = pareto.candidates(rows)
    if len(pts) < 2:
        return None
    best = pareto.optimal_ids(rows)
    timed = "denoise stage (s)" if all(_finite(r.metrics.get("stage_denoise_s")) for r, _, _ in pts) \
        else "time (s: denoise stage, else median step)"
    return {"labels": [f"{r.id[:8]} {_lever_label(r)}" for r, _, _ in pts],
            "seconds": [s for _, s, _ in pts],
            "psnr_db": [q if math.isfinite(q) else None for _, _, q in pts],
            "pareto": [r.id in best for r, _, _ in pts],
            "xlabel": timed, "ylabel": "PSNR vs reference point (dB)"}


def _predicted_vs_measured(rows: list[Row]) -> dict[str, Any] | None:
    """The cost model's predicted step against the measured median, per completed point (only
    when some point has both)."""
    pts = [(r, r.metrics.get("predicted_ms_per_step"), r.metrics.get("step_ms_median")) for r in rows if r.ok]
    pts = [(r, p, m) for r, p, m in pts if _finite(p) and _finite(m)]
    if not pts:
        return None
    return {"labels": [f"{r.id[:8]} {r.values.get('layout')}" for r, _, _ in pts],
            "predicted_ms": [p for _, p, _ in pts], "measured_ms": [m for _, _, m in pts],
            "xlabel": "measured step time, median (ms)", "ylabel": "predicted step time (ms)"}


#: The stages a generate point records (runtime/pipelines/phase_timing.py), bottom to top of a bar.
STAGE_ORDER = ("encode", "load", "denoise", "decode", "save")


def _stage_bars(rows: list[Row]) -> dict[str, Any] | None:
    """Seconds per stage per point that recorded stages (generate points), stacked."""
    pts = [r for r in rows if any(_finite(r.metrics.get(f"stage_{st}_s")) for st in STAGE_ORDER)]
    if not pts:
        return None
    return {"labels": [f"{r.id[:8]} {r.values.get('layout')}" for r in pts],
            "stages": {st: [r.metrics.get(f"stage_{st}_s") if _finite(r.metrics.get(f"stage_{st}_s")) else 0.0
                            for r in pts] for st in STAGE_ORDER},
            "xlabel": "point (id, layout)", "ylabel": "seconds"}


def _finite(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)


def _same_output(rows: list[Row]) -> dict[str, Any] | None:
    """PSNR (dB, None = identical) and latent max abs error per compared point, in report order."""
    compared = [r for r in rows if r.metrics.get("psnr_db") is not None or r.metrics.get("latent_max_abs_err") is not None]
    if not compared:
        return None

    def finite(v):
        return v if isinstance(v, float) and math.isfinite(v) else None

    return {"labels": [f"{r.id[:8]} {r.values.get('layout')}" + (" (ref)" if r.output_ref == r.id else "")
                       for r in compared],
            "psnr_db": [finite(r.metrics.get("psnr_db")) for r in compared],
            "latent_max_abs_err": [r.metrics.get("latent_max_abs_err") for r in compared],
            "ylabel": "PSNR vs reference point (dB)"}


def draw_plots(data: dict[str, Any], folder: Path) -> dict[str, Path]:
    """One PNG per plot in ``folder``, drawn from ``data`` only; also writes plots.json."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    folder.mkdir(parents=True, exist_ok=True)
    paths: dict[str, Path] = {}
    # labels are names from files (a cluster path may hold `$`): text, never mathtext
    with matplotlib.rc_context({"text.parse_math": False, "text.usetex": False}):
        for name in [n for n in PLOTS + (SAME_OUTPUT, SPEED_QUALITY, PREDICTED, STAGES) if n in data]:
            png = io.BytesIO()
            _draw(plt, name, data[name], png)
            paths[name] = write_atomic(folder / f"{name}.png", png.getvalue(), fsync=False)
    _write_text(folder / PLOT_DATA_FILE, json.dumps(data, indent=1))
    return paths


def gpu_ticks(d: dict[str, Any]) -> list[int]:
    """The x ticks of a plot over GPU counts: every count its series have, as integers."""
    return sorted({int(x) for s in d["series"].values() for x in s["x"]})


def _draw(plt, name: str, d: dict[str, Any], out: Any) -> None:
    """One plot of ``d`` written as a PNG to ``out`` (a file object)."""
    fig, ax = plt.subplots(figsize=(8, 4.5), layout="constrained")
    if name == SAME_OUTPUT:
        xs = list(range(len(d["labels"])))
        ys = [SAME_OUTPUT_CAP if y is None else y for y in d["psnr_db"]]
        bars = ax.bar(xs, ys, color=["gray" if y is None else "tab:blue" for y in d["psnr_db"]])
        for bar, y, err in zip(bars, d["psnr_db"], d["latent_max_abs_err"]):
            text = ("identical" if y is None else f"{y:.1f} dB") + (f"\nlatents {err:.2g}" if err is not None else "")
            ax.annotate(text, (bar.get_x() + bar.get_width() / 2, bar.get_height()), ha="center",
                        textcoords="offset points", xytext=(0, 3), fontsize=7)
        ax.set_xticks(xs, d["labels"], rotation=30, ha="right", fontsize=7)
        ax.set_xlabel("point (id, layout; ref = the reference)")
    elif name == SPEED_QUALITY:
        ys = [SAME_OUTPUT_CAP if y is None else y for y in d["psnr_db"]]
        on = [(x, y) for x, y, p in zip(d["seconds"], ys, d["pareto"]) if p]
        off = [(x, y) for x, y, p in zip(d["seconds"], ys, d["pareto"]) if not p]
        if off:
            ax.scatter(*zip(*off), color="tab:gray", label="dominated")
        front = sorted(on)
        ax.plot(*zip(*front), color="tab:red", marker="*", markersize=12, label="Pareto-optimal")
        for x, y, label, raw in zip(d["seconds"], ys, d["labels"], d["psnr_db"]):
            ax.annotate(label + (" (identical)" if raw is None else ""), (x, y), textcoords="offset points",
                        xytext=(4, 4), fontsize=6)
        ax.set_xlabel(d["xlabel"])
    elif name == "comm_vs_compute":
        xs = range(len(d["labels"]))
        ax.bar(xs, d["compute_ms"], label="compute and the rest")
        ax.bar(xs, d["comm_ms"], bottom=d["compute_ms"], label="collectives")
        ax.set_xticks(list(xs), d["labels"], rotation=60, ha="right", fontsize=7)
        ax.set_xlabel("point (GPUs, layout)")
    elif name == PREDICTED:
        ax.scatter(d["measured_ms"], d["predicted_ms"], label="points")
        for x, y, label in zip(d["measured_ms"], d["predicted_ms"], d["labels"]):
            ax.annotate(label, (x, y), textcoords="offset points", xytext=(4, 4), fontsize=6)
        hi = max(d["measured_ms"] + d["predicted_ms"]) * 1.1
        ax.plot([0, hi], [0, hi], color="gray", linestyle="--", label="predicted = measured")
        ax.set_xlim(0, hi)
        ax.set_ylim(0, hi)
        ax.set_xlabel(d["xlabel"])
    elif name == STAGES:
        xs = list(range(len(d["labels"])))
        bottom = [0.0] * len(xs)
        for stage, values in d["stages"].items():
            ax.bar(xs, values, bottom=bottom, label=stage)
            bottom = [b + v for b, v in zip(bottom, values)]
        ax.set_xticks(xs, d["labels"], rotation=30, ha="right", fontsize=7)
        ax.set_xlabel(d["xlabel"])
    else:
        for label, s in d["series"].items():
            ax.plot(s["x"], s["y"], marker="o", label=label)
            if name == "best_layout":
                for x, y, lay in zip(s["x"], s["y"], s["layout"]):
                    ax.annotate(lay, (x, y), textcoords="offset points", xytext=(4, 4), fontsize=7)
        if name == "scaling_efficiency":
            ax.axhline(d["ideal"], color="gray", linestyle="--", label="ideal linear")
            ax.set_ylim(bottom=0)
        if name in ("latency_vs_gpus", "best_layout"):
            ax.set_xscale("log", base=2)
        gpus = gpu_ticks(d)
        if gpus:  # GPU counts are whole numbers: a tick at each count there is, no minor ticks
            ax.set_xticks(gpus, [str(g) for g in gpus])
            ax.minorticks_off()
        ax.set_xlabel(d["xlabel"])
    ax.set_ylabel(d["ylabel"])
    ax.set_title(name.replace("_", " "))
    if ax.get_legend_handles_labels()[0]:
        ax.legend(fontsize=7)
    try:
        fig.savefig(out, dpi=100, format="png")
    finally:
        plt.close(fig)


def draw_history(docs: Sequence[dict[str, Any]], out: Any, *, small: bool = False) -> None:
    """Trends (:func:`.history_view.trend_doc`) as one PNG written to ``out`` (a path or a file
    object): one panel per point, its runs in time order (ticks: date and git revision), the
    rolling baseline dashed, runs worse than it by more than the threshold in red."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    with matplotlib.rc_context({"text.parse_math": False, "text.usetex": False}):
        n = max(len(docs), 1)
        fig, axes = plt.subplots(n, 1, figsize=(5, 2.6) if small else (8, 3.2 * n), layout="constrained",
                                 squeeze=False)
        for ax, doc in zip(axes[:, 0], docs):
            runs = doc["runs"]
            xs = list(range(len(runs)))
            ys = [r["value"] if r["value"] is not None else float("nan") for r in runs]
            base = [r["baseline"] if r["baseline"] is not None else float("nan") for r in runs]
            ax.plot(xs, ys, marker="o", label=doc["metric"])
            ax.plot(xs, base, linestyle="--", marker="_", markersize=12, color="gray", label=f"baseline (median of last {doc['k']})")
            bad = [(x, y) for x, y, r in zip(xs, ys, runs) if r["regressed"]]
            if bad:
                ax.plot(*zip(*bad), linestyle="none", marker="o", color="red", label="regressed")
            ax.set_xticks(xs, [f"{r['when'][5:10]}\n{(r['git_revision'] or '')[:7]}" for r in runs],
                          fontsize=6 if small else 7)
            ax.set_ylabel(f"{doc['metric']} ({doc['unit']})", fontsize=7 if small else 9)
            ax.set_title(f"{doc['id']} ({doc['campaign']})", fontsize=8 if small else 10)
            ax.legend(fontsize=6 if small else 7)
        try:
            fig.savefig(out, dpi=100, format="png")
        finally:
            plt.close(fig)


def _history_section(history: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """The page's history entries: a plot (base64 PNG) and the rows of each point's table."""
    out = []
    ordered = sorted(history, key=lambda d: (not d["runs"][-1]["regressed"], d["id"]))
    for doc in ordered[:HISTORY_POINTS]:
        png = io.BytesIO()
        draw_history([doc], png, small=True)
        out.append({"doc": doc, "image": base64.b64encode(png.getvalue()).decode("ascii"),
                    "runs": [{**r, "value_text": short_value(r["value"]), "baseline_text": short_value(r["baseline"]),
                              "ratio_text": f"{r['ratio']:.3f}" if r["ratio"] is not None else "",
                              "revision": (r["git_revision"] or "")[:10]} for r in doc["runs"]]})
    return out


#: The page's table in column groups a reader shows or hides (name, what it holds, shown at first);
#: ``core`` (which point, its median step, its verdict) is always shown.
COLUMN_GROUPS = (
    ("core", "point, median step, verdict", True),
    ("setup", "cluster, nodes, model, shape, dtype, levers, repeat", True),
    ("time", "step p90 and min, tokens/s", True),
    ("compute", "TFLOP/s, fraction of peak, memory", False),
    ("comm", "collectives: time and bytes", False),
    ("model", "the planner's ideal and the cost model's prediction", False),
    ("stages", "generate stages: seconds and memory", False),
    ("outputs", "same output and step cache", False),
)
_CORE = ("id", "gpus", "layout", "status", "step_ms_median", "reference", pareto.COLUMN)
_GROUP_OF = {
    **{c: "setup" for c in (*KEY_COLUMNS, *LEVER_COLUMNS)},
    **{c: "core" for c in _CORE},
    **{c: "time" for c in ("step_ms_p90", "step_ms_min", "tokens_per_s")},
    **{c: "compute" for c in ("tflops_per_gpu", "peak_fraction", "peak_memory_gib")},
    **{c: "comm" for c in ("comm_ms_per_step", "comm_bytes_per_step")},
    **{c: "model" for c in ("ideal_ms_per_step", "predicted_ms_per_step", "prediction_error")},
    **{m.name: "stages" for m in STAGE_METRICS},
    **{m.name: "outputs" for m in OUTPUT_METRICS + CACHE_METRICS},
}


def column_group(column: str) -> str:
    """The group a table column is shown or hidden with (a column no group names: ``model``)."""
    return _GROUP_OF.get(column, "model")


def _summary_lines(rows: list[Row]) -> list[dict[str, Any]]:
    """The summary's lines (:mod:`.summary`) with their cells as text for people."""
    out = []
    for s in summary.sizes(rows):
        out.append({"s": s, "best_text": short_value(s.best_ms), "default_text": short_value(s.default_ms),
                     "one_text": short_value(s.one_gpu_ms), "vs_default": summary.ratio_text(s.vs_default),
                     "vs_one": summary.ratio_text(s.vs_one_gpu)})
    return out


def write_html(rows: list[Row], plots: dict[str, Path], path: Path, title: str,
               history: Sequence[dict[str, Any]] = (), published: Sequence[dict[str, Any]] = ()) -> Path:
    """One self-contained page: the summary (:mod:`.summary`), the table (same cells as the CSV,
    in column groups a reader shows or hides, sortable by any column), the plots as data URIs,
    the history of the points with more than one run, and the points that repeat a published
    measurement (:mod:`.published_points`)."""
    import jinja2

    cols = columns(rows)
    found = checks(rows)
    table = []
    for r in rows:
        cells = []
        for c in cols:
            group = column_group(c)
            value = r.cell(c)
            bound = r.bounds.get(c)
            cells.append({
                "text": short_value(value), "exact": format_value(value),
                "verdict": r.verdicts.get(c, "") if c not in ("reference",) else value,
                "title": f"reference {bound.text()}" if bound else "", "group": group,
            })
        table.append({"id": r.id, "cells": cells, "error": r.error})
    images = {name: base64.b64encode(p.read_bytes()).decode("ascii") for name, p in plots.items()}
    env = jinja2.Environment(loader=jinja2.FileSystemLoader(str(templates_dir())), autoescape=True,
                             undefined=jinja2.StrictUndefined)
    groups = [{"name": n, "what": w, "shown": shown} for n, w, shown in COLUMN_GROUPS
              if any(column_group(c) == n for c in cols)]
    html = env.get_template(HTML_TEMPLATE).render(title=title, columns=[
                                                      {"name": c, "group": column_group(c), "parts": c.split("_")}
                                                      for c in cols],
                                                  rows=table, images=images, groups=groups,
                                                  sizes=_summary_lines(rows), fingerprint=summary.fingerprint(rows),
                                                  history=_history_section(history),
                                                  history_more=max(len(history) - HISTORY_POINTS, 0),
                                                  published=[published_cells(p) for p in published],
                                                  checks=[check_cells(c) for c in found], check_counts=counts(found))
    return _write_text(path, html)


def check_cells(c: Check) -> dict[str, Any]:
    """A reference check with its cells as text for people."""
    return {**{k: getattr(c, k) for k in ("id", "gpus", "layout", "metric", "reference", "band", "measured",
                                          "verdict", "ratio", "why")},
            "measured_text": short_value(c.measured) if c.measured is not None else "-",
            "ratio_text": f"{c.ratio:.3g}x" if c.ratio is not None else "-"}


def published_cells(p: dict[str, Any]) -> dict[str, Any]:
    """A published-measurement entry with its cells as text for people."""
    err = p.get("predicted_error")
    return {**p, "published_text": short_value(p["published_s"]), "predicted_text": short_value(p.get("predicted_s")),
            "error_text": f"{err:+.1%}" if err is not None else "",
            "measured_text": short_value(p.get("measured_denoise_s"))}


def build_report(rows: list[Row], folder: Path, title: str,
                 history: Sequence[dict[str, Any]] = (), published: Sequence[dict[str, Any]] = ()) -> dict[str, Path]:
    """CSV, plots and HTML page into ``folder`` (with ``history``, trends of points run more
    than once, also history.json); returns their paths by name. A file that cannot be written
    (a full disk) is a one-line SporchError; no file is left half-written."""
    try:
        csv_path = write_csv(rows, folder / CSV_FILE)
        plots = draw_plots(plot_data(rows), folder)
        html = write_html(rows, plots, folder / HTML_FILE, title, history, published)
        extra = {}
        if history:
            extra["history_json"] = _write_text(folder / HISTORY_FILE, json.dumps(list(history), indent=1))
        else:
            (folder / HISTORY_FILE).unlink(missing_ok=True)  # an earlier report's, no longer true
    except OSError as exc:
        raise SporchError(f"cannot write the report into {folder} ({exc.strerror or exc}); "
                          "free some space or pick another folder with --out") from None
    return {"csv": csv_path, "html": html, "plots_json": folder / PLOT_DATA_FILE, **plots, **extra}
