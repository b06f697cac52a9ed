"""The groups the report page's table columns are shown or hidden in."""

from __future__ import annotations

from sporch.orchestrator.campaign import pareto
from sporch.orchestrator.campaign.collect import KEY_COLUMNS, LEVER_COLUMNS
from sporch.orchestrator.campaign.metrics import CACHE_METRICS, OUTPUT_METRICS, STAGE_METRICS


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
