"""The band a prediction carries: the held-out ratio error of the published tables of its GPU row
and mode (``data/fitted.yaml``'s ``bands``, written by plan/validation.py) and the text of what
it rests on."""

from __future__ import annotations

import functools

from sporch.orchestrator.plan.cost_constants import fitted_table, gpu_entry


@functools.lru_cache(maxsize=128)
def prediction_band(gpu_model: str, compiled: bool) -> tuple[float, str]:
    """(band, what it rests on): the largest held-out ratio error of the published tables of this
    GPU row and mode (plan/validation.py; ``data/fitted.yaml``'s ``bands``), else of every table of
    the mode; (0, "") where no table says anything (the cpu row, a missing fit). The band is about
    ratios between layouts; where sporch's own steps were measured on that GPU row and mode
    (``absolute``: plan/absolute_check.py) the text adds how far their absolute times were from
    the prediction."""
    mode = "compiled" if compiled else "eager"
    row = gpu_entry(gpu_model)["name"]
    bands = fitted_table().get("bands") or {}
    if row == "cpu":
        return 0.0, ""
    measured = (fitted_table().get("absolute") or {}).get(row, {}).get(mode)
    absolute = f"; sporch's measured {row} {mode} steps {measured[0]:+.0%}..{measured[1]:+.0%} vs predicted" if measured else ""
    if mode in (bands.get(row) or {}):
        return float(bands[row][mode]), f"held-out {row} {mode} tables{absolute}"
    if mode in (bands.get("*") or {}):
        return float(bands["*"][mode]), f"held-out {mode} tables, no {row} one{absolute}"
    return 0.0, ""
