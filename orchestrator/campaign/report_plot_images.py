"""The report's plots as PNG files, drawn from their data (:mod:`.report_plot_data`) only.

Identical frames (an infinite PSNR) are drawn at ``SAME_OUTPUT_CAP`` dB and labelled
"identical"; the Pareto-optimal points of the speed/quality plot are starred and joined.
"""

from __future__ import annotations

import io
import json
from pathlib import Path
from typing import Any

from sporch.orchestrator.campaign.report_files import PLOT_DATA_FILE, write_text
from sporch.orchestrator.campaign.report_plot_data import PLOTS, PREDICTED, SAME_OUTPUT, SPEED_QUALITY, STAGES
from sporch.orchestrator.safe_files import write_atomic

#: Where an infinite PSNR (identical frames) is drawn.
SAME_OUTPUT_CAP = 100.0


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
    write_text(folder / PLOT_DATA_FILE, json.dumps(data, indent=1))
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
