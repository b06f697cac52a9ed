"""The metrics a campaign reports: name, unit, which direction is better, where it is read.

Every metric is read from a point's ``result.json`` (``metrics`` = rank 0's benchmark
record, written by sporch.orchestrator.benchstats); nothing is recomputed from the plan.
A generate point's ``metrics.stages`` (sporch.runtime.pipelines.phase_timing, docs/generate.md) gives
the ``stage_<stage>_*`` metrics: ``stages.<stage>.s`` as ``stage_<stage>_s``, its
``peak_memory_bytes`` as ``stage_<stage>_peak_memory_gib`` and denoise's ``s_per_step`` as
``stage_denoise_s_per_step`` (rank 0's: the leader, which also decodes and saves).
The output metrics (``latent_max_abs_err``, ``psnr_db``, ``ssim``) are the exception: they
compare a point's saved outputs with the reference point's (:mod:`.outputs`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Optional


@dataclass(frozen=True)
class Metric:
    name: str
    unit: str
    better: str  # "lower" | "higher"
    label: str


#: Metrics of every run's steps: every report shows them.
STEP_METRICS: tuple[Metric, ...] = (
    Metric("step_ms_median", "ms", "lower", "step median"),
    Metric("step_ms_p90", "ms", "lower", "step p90"),
    Metric("step_ms_min", "ms", "lower", "step min"),
    Metric("tokens_per_s", "tokens/s", "higher", "tokens/s"),
    Metric("comm_ms_per_step", "ms", "lower", "collectives"),
    Metric("peak_memory_gib", "GiB", "lower", "peak memory"),
    Metric("tflops_per_gpu", "TFLOP/s", "higher", "TFLOP/s per GPU"),
    Metric("peak_fraction", "fraction", "higher", "of peak"),
    Metric("comm_bytes_per_step", "bytes", "lower", "bytes sent per rank per step"),
    Metric("ideal_ms_per_step", "ms", "lower", "planner's ideal step"),
    Metric("predicted_ms_per_step", "ms", "lower", "cost model's predicted step"),
    Metric("prediction_error", "fraction", "lower", "predicted / measured step - 1"),
)

#: Per-stage metrics of generate points (stages: encode, load, denoise, decode, save): a report
#: shows only the ones some point has, so a benchmark campaign gets none of them.
STAGE_METRICS: tuple[Metric, ...] = (
    Metric("stage_startup_s", "s", "lower", "start-up: process start, imports, process group"),
    Metric("stage_encode_s", "s", "lower", "text encode"),
    Metric("stage_encode_peak_memory_gib", "GiB", "lower", "text encode peak memory"),
    Metric("stage_load_s", "s", "lower", "transformer load"),
    Metric("stage_load_peak_memory_gib", "GiB", "lower", "transformer load peak memory"),
    Metric("stage_denoise_s", "s", "lower", "denoise"),
    Metric("stage_denoise_s_per_step", "s", "lower", "denoise per step"),
    Metric("stage_denoise_peak_memory_gib", "GiB", "lower", "denoise peak memory"),
    Metric("stage_decode_s", "s", "lower", "decode"),
    Metric("stage_decode_peak_memory_gib", "GiB", "lower", "decode peak memory"),
    Metric("stage_save_s", "s", "lower", "save"),
    Metric("stage_save_peak_memory_gib", "GiB", "lower", "save peak memory"),
)

#: Same output across layouts (generate points; computed by .outputs from the point folders'
#: latents and decoded frames against the campaign's reference point, never read from result.json).
OUTPUT_METRICS: tuple[Metric, ...] = (
    Metric("latent_max_abs_err", "abs", "lower", "final latents, max abs error vs the reference point"),
    Metric("psnr_db", "dB", "higher", "decoded frames, PSNR vs the reference point"),
    Metric("ssim", "fraction", "higher", "decoded frames, SSIM vs the reference point"),
)

#: Step caching (workload.cache; result.json ``step_cache``): shown only when some point has it.
CACHE_METRICS: tuple[Metric, ...] = (
    Metric("steps_skipped", "steps", "higher", "denoising steps the step cache skipped (all dp replicas)"),
)

METRICS: tuple[Metric, ...] = STEP_METRICS + STAGE_METRICS + CACHE_METRICS + OUTPUT_METRICS

#: The phases the runtime times (``metrics.stages``), in the order they run.
RUN_PHASES = ("startup", "load", "encode", "denoise", "decode", "save")
#: The cost model's prediction of a point (its plan.json's ``estimates.predicted``, read by .collect
#: beside the measurement): each phase the runtime times, the whole job and its GPU-hours. Not in
#: METRICS: a prediction is no measurement, ``campaign compare`` never calls it a regression.
PREDICTED_METRICS: tuple[Metric, ...] = tuple(
    Metric(f"predicted_{ph}_s", "s", "lower", f"predicted {ph}") for ph in RUN_PHASES) + (
    Metric("predicted_job_s", "s", "lower", "predicted job: every phase"),
    Metric("predicted_gpu_hours", "GPU-h", "lower", "predicted GPU-hours: job x GPUs"),
)

BY_NAME: dict[str, Metric] = {m.name: m for m in METRICS + PREDICTED_METRICS}

GIB = 1024**3
OUTPUT_NAMES = frozenset(m.name for m in OUTPUT_METRICS)


def metric_value(result: dict[str, Any], name: str) -> Optional[float]:
    """``name`` from a result.json dict (None when absent)."""
    metrics = result.get("metrics") or {}
    if name == "prediction_error":
        pred, measured = metric_value(result, "predicted_ms_per_step"), metric_value(result, "step_ms_median")
        return pred / measured - 1 if pred is not None and measured else None
    if name == "peak_memory_gib":
        return _gib(metrics, "peak_memory_bytes")
    if name.startswith("stage_"):
        return _stage_value(metrics, name)
    if name in OUTPUT_NAMES:
        return None  # compared across points (.outputs), not read
    if name == "steps_skipped":
        cache = result.get("step_cache")
        return _number(cache.get("steps_skipped")) if isinstance(cache, dict) else None
    return _number(metrics.get(name))


def _stage_value(metrics: dict[str, Any], name: str) -> Optional[float]:
    """``stage_<stage>_<figure>`` from ``metrics.stages.<stage>`` (None when the stage or the
    figure is absent, or the record is not an object)."""
    _, stage, figure = name.split("_", 2)
    stages = metrics.get("stages")
    record = stages.get(stage) if isinstance(stages, dict) else None
    if not isinstance(record, dict):
        return None
    if figure == "peak_memory_gib":
        return _gib(record, "peak_memory_bytes")
    return _number(record.get(figure))


def _gib(record: dict[str, Any], key: str) -> Optional[float]:
    """A byte count of ``record`` in GiB (None when it is not a number)."""
    raw = _number(record.get(key))
    return None if raw is None else raw / GIB


def _number(value: Any) -> Optional[float]:
    """A JSON number as a float (NaN and infinities kept: a comparison must see them); None
    for anything else (text, a list, a bool) or a number too large for a float."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    try:
        return float(value)
    except OverflowError:
        return None


def is_worse(name: str, new: float, old: float, threshold: float) -> bool:
    """True when ``new`` is worse than ``old`` by more than ``threshold`` (a fraction)."""
    if old == 0:
        return False
    change = (new - old) / abs(old)
    return change > threshold if BY_NAME[name].better == "lower" else -change > threshold
