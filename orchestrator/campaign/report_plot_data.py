"""The series every plot of the report draws (what plots.json holds), from the rows alone.

- ``latency_vs_gpus``: median step time against GPU count, one series per workload and
  layout family (dp, cfg and ulysses fixed; ring grows with the GPUs);
- ``scaling_efficiency``: for the best layout at each size, ``T(n0) n0 / (T(n) n)`` against
  the ideal linear scaling (1.0);
- ``comm_vs_compute``: time in collectives and the rest of the step, per point;
- ``best_layout``: the fastest layout at each size, per workload;
- ``same_output`` (only when generate points were compared, :mod:`.outputs`): per point the
  PSNR of its decoded frames against the reference point, and its latents' max abs error.
- ``speed_vs_psnr`` (when two or more points have a time and a PSNR): each point's denoise
  seconds against its PSNR, the Pareto-optimal ones (:mod:`.pareto`) marked.
- ``predicted_vs_measured`` and ``stage_seconds`` (when the points have them): the cost model
  against the measurement, and the stages of generate points.

Repeats of a point are combined by the median of their step medians. The pictures are drawn
from this data by :mod:`.report_plot_images`.
"""

from __future__ import annotations

import math
import statistics
from collections import defaultdict
from pathlib import Path
from typing import Any, Callable

from sporch.orchestrator.campaign import pareto
from sporch.orchestrator.campaign.collect import LEVER_COLUMNS, Row
from sporch.orchestrator.contract.plan import Layout

PLOTS = ("latency_vs_gpus", "scaling_efficiency", "comm_vs_compute", "best_layout")
#: Drawn only when some point has output metrics.
SAME_OUTPUT = "same_output"
#: Drawn when at least two points have a time and a PSNR (.pareto): speed against quality.
SPEED_QUALITY = "speed_vs_psnr"
#: Drawn when the points have what they need: the cost model against the measurement, and the
#: stages of generate points.
PREDICTED = "predicted_vs_measured"
STAGES = "stage_seconds"


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
