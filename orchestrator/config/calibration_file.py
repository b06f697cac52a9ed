"""A cluster descriptor's calibration: the constants of the cost model it may set, their checks,
and the reader of a calibration file (``calibration: <file>``, written by ``sporch calibrate``).

The model that uses the constants is :mod:`sporch.orchestrator.plan.cost` (a cluster's over the
defaults: :mod:`sporch.orchestrator.plan.cost_constants`); the fit that writes the file is
:mod:`sporch.orchestrator.plan.calibration`.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any, Mapping, Optional

from sporch.orchestrator.contract.results import ResultFileError, read_bounded_text
from sporch.orchestrator.contract.sections import MEASURABLE_LINK_FIGURES, MeasuredLinksSpec
from sporch.orchestrator.errors import SporchError

#: Version of the calibration file (its ``sporch_calibration`` key).
FORMAT_VERSION = 1
#: The largest calibration file read (one is well under a KiB).
MAX_FILE_BYTES = 1024 * 1024
#: Constants of the cost model (the GPU table's columns, data/gpus.yaml).
CONSTANTS = ("gemm_efficiency", "attention_efficiency", "parallel_units", "hbm_gb_per_s", "elementwise_bytes",
             "compiled_elementwise_bytes", "ring_merge_bytes", "ring_step_s", "eager_ring_step_s", "link_efficiency", "a2a_latency_s", "p2p_latency_s",
             "layer_overhead_s", "eager_layer_s", "eager_a2a_message_s", "eager_ring_layer_s", "fixed_s", "decode_flops_per_pixel",
             "decode_bytes_per_pixel", "image_decode_bytes_per_pixel",
             # the phases around the denoising (plan/phase_cost.py)
             "startup_s", "process_group_s", "load_fixed_s", "local_read_s_per_gb", "encode_efficiency",
             "cpu_encode_s_per_tflop", "encode_fixed_s", "decode_fixed_s", "save_s_per_mpixel", "save_fixed_s")
#: Constants that must be > 0 (efficiencies, SM count, bandwidth); the others are costs (>= 0).
POSITIVE = ("gemm_efficiency", "attention_efficiency", "link_efficiency", "parallel_units", "hbm_gb_per_s",
            "encode_efficiency")


def check_constants(values: Mapping[str, Any], where: str) -> dict[str, float]:
    """``values`` as floats, or a one-line SporchError naming ``where`` and the bad constant."""
    out: dict[str, float] = {}
    for k, v in values.items():
        if k not in CONSTANTS:
            raise SporchError(f"{where}: unknown constant {k!r}; known: {', '.join(CONSTANTS)}")
        if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v):
            raise SporchError(f"{where}: {k} must be a number, got {v!r}")
        positive = k in POSITIVE
        if v < 0 or (positive and v == 0):
            raise SporchError(f"{where}: {k} must be {'> 0' if positive else '>= 0'}, got {v}")
        out[k] = float(v)
    return out


def load_constants(path: str | Path, where: Optional[str] = None) -> dict[str, float]:
    """The ``constants`` of a calibration file (one-line errors for a missing or bad file)."""
    return load_calibration(path, where)[0]


#: The ``links`` keys of a calibration file that replace the descriptor's figures (GB/s; written
#: by ``sporch calibrate --links`` from a preflight's measurements, plan/measured_links.py).
LINK_RATES = ("intra_node_gb_per_s", "inter_node_gb_per_s")


def load_calibration(path: str | Path, where: Optional[str] = None
                     ) -> tuple[dict[str, float], dict[str, float], Optional[MeasuredLinksSpec]]:
    """(constants, link rates, measured links) of a calibration file: the rates are the ``links``
    section's :data:`LINK_RATES`, the record says which figures the preflight measured, where and
    when (no rates and None where the file has no link measurements)."""
    import yaml

    p = Path(path)
    where = where or str(p)
    try:
        doc = yaml.safe_load(read_bounded_text(p, MAX_FILE_BYTES))
    except FileNotFoundError:
        raise SporchError(f"{where}: calibration file {p} not found; write one with `sporch calibrate DIR --out {p}`")
    except ResultFileError as e:  # a folder, a FIFO, not UTF-8, too big
        raise SporchError(f"{where}: calibration file {e}; "
                          f"write one with `sporch calibrate DIR --out {p}`")
    except yaml.YAMLError as e:
        raise SporchError(f"{where}: {p} is not YAML ({' '.join(str(e).split())[:120]})")
    if not isinstance(doc, dict) or not isinstance(doc.get("constants"), dict):
        raise SporchError(f"{where}: {p} has no 'constants' mapping (is it a file from `sporch calibrate`?)")
    constants = check_constants(doc["constants"], f"{p}: constants")
    links = doc.get("links")
    if links is None:
        return constants, {}, None
    if not isinstance(links, dict):
        raise SporchError(f"{p}: 'links' must be a mapping (written by `sporch calibrate --links`)")
    rates = {}
    for k in LINK_RATES:
        v = links.get(k)
        if v is None:
            continue
        if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v) or v <= 0:
            raise SporchError(f"{p}: links.{k} must be a number > 0 (GB/s), got {v!r}")
        rates[k] = float(v)
    return constants, rates, _measured(links, rates, constants, p)


def _measured(links: dict, rates: dict[str, float], constants: dict[str, float], p: Path) -> MeasuredLinksSpec:
    """The ``links`` section's record of what was measured: the figures its ``measured`` names
    (a file without it: the rates and the latencies it ``sets``), where and when."""
    measured = links.get("measured")
    names = set(measured) if isinstance(measured, dict) else {*rates, *(links.get("sets") or ())}
    figures = [k for k in MEASURABLE_LINK_FIGURES if k in names and (k in rates or k in constants)]
    when = links.get("measured_at")
    return MeasuredLinksSpec(calibration=str(p.resolve()), preflight=str(links.get("preflight") or "?"),
                             measured_at=when if isinstance(when, str) else None,
                             backend=str(links.get("backend") or "?"), figures=figures)
