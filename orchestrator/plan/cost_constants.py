"""The cost model's constants (the GPU table's columns, ``config/calibration_file.CONSTANTS``):
the GPU model's row of ``data/gpus.yaml`` (priors), the one fit to every published table applied
to it (``data/fitted.yaml``: the defaults), a cluster descriptor's calibration over them."""

from __future__ import annotations

import fnmatch
import functools
from pathlib import Path
from typing import Any

from sporch.orchestrator.config.calibration_file import CONSTANTS
from sporch.orchestrator.plan.data_tables import read_data_table

GPU_TABLE = Path(__file__).resolve().parent / "data" / "gpus.yaml"
#: The one fit of SHARED_FIT to every published table (plan/validation.py): applied to every GPU
#: row but ``cpu`` by :func:`default_constants`.
FITTED_TABLE = Path(__file__).resolve().parent / "data" / "fitted.yaml"
#: The constants fitted to the published tables, shared by every GPU model: efficiencies as one
#: multiplier of each GPU's prior, the others as one value (plan/calibration.py, fit_shared).
#: Chosen by the leave-one-table-out validation (docs/plan.md): ``fixed_s`` (one number for every
#: pipeline), ``ring_step_s`` (fitted on eager rings it took the host's time and made held-out
#: compiled rings up to 5.5x too slow) and a video VAE's FLOPs per pixel (worse held-out tables) are
#: not fitted: they stay at the GPU rows' priors (0), for a calibration to set. ``ring_merge_bytes``
#: stays at issue 13's kernel measurement (43): fitted beside ``eager_ring_step_s`` it fell to 0 and
#: the held-out compiled H100 Flux table lost its ring 4 vs Ulysses 4 order. The all-to-all and ring
#: latencies stay at the rows' priors (issue 49): fitted they went to 0, so an all-to-all's fixed
#: cost no longer grew with the group; held, the held-out tables came out better. The phases'
#: constants (plan/phase_cost.py) stay at the priors too, for ``sporch calibrate`` to measure.
SHARED_FIT = ("gemm_efficiency", "attention_efficiency", "elementwise_bytes", "compiled_elementwise_bytes",
              "eager_ring_step_s", "link_efficiency", "layer_overhead_s", "eager_layer_s",
              "eager_a2a_message_s", "eager_ring_layer_s", "decode_bytes_per_pixel", "image_decode_bytes_per_pixel")


@functools.lru_cache(maxsize=1)
def gpu_table() -> tuple[dict[str, Any], ...]:
    return tuple(read_data_table(GPU_TABLE)["gpus"])


@functools.lru_cache(maxsize=64)
def gpu_entry(model: str) -> dict[str, Any]:
    """The table row whose ``match`` patterns match ``model`` (case-insensitive); ``generic`` last
    (the table's own row: read it, do not change it)."""
    name = (model or "").lower()
    for row in gpu_table():
        if any(fnmatch.fnmatchcase(name, pat.lower()) for pat in row["match"]):
            return row
    return gpu_table()[-1]


def prior_constants(gpu_model: str) -> dict[str, float]:
    """The GPU row's own values (spec sheets, kernel measurements, round numbers): no fit to the
    published tables in them."""
    row = gpu_entry(gpu_model)
    return {k: float(row[k]) for k in CONSTANTS}


@functools.lru_cache(maxsize=1)
def fitted_table() -> dict[str, Any]:
    if not FITTED_TABLE.exists():
        return {"scales": {}, "values": {}}
    return read_data_table(FITTED_TABLE)


def default_constants(gpu_model: str) -> dict[str, float]:
    """The GPU row's priors with the published tables' fit (``data/fitted.yaml``) applied; the
    ``cpu`` row (gloo ranks: calibrate them) stays as it is. A new dict (the caller may change it)."""
    return dict(_default_constants(gpu_model))


@functools.lru_cache(maxsize=64)
def _default_constants(gpu_model: str) -> dict[str, float]:
    consts = prior_constants(gpu_model)
    if gpu_entry(gpu_model)["name"] == "cpu":
        return consts
    fit = fitted_table()
    for k, s in (fit.get("scales") or {}).items():
        consts[k] = consts[k] * float(s)
    consts.update({k: float(v) for k, v in (fit.get("values") or {}).items()})
    return consts


def cluster_constants(cluster: Any) -> tuple[dict[str, float], str]:
    """(constants, where they come from) for a cluster descriptor (a ClusterSpec)."""
    model = cluster.gpu.model or ""
    consts = default_constants(model)
    source = f"{gpu_entry(model)['name']} defaults"
    if cluster.calibration_constants:
        consts.update({k: float(v) for k, v in cluster.calibration_constants.items() if k in CONSTANTS})
        source = f"calibration {cluster.calibration or '(inline)'}"
    return consts, source
