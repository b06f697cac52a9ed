"""The calibration file ``sporch calibrate`` writes: metadata, the fit's quality, each phase's
measured and calibrated mean, the link figures a preflight measured, every constant of the model.
Its reader (what a cluster descriptor's ``calibration:`` loads) is
:mod:`sporch.orchestrator.config.calibration_file`; the fit, :mod:`.calibration`."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Mapping, Optional

from sporch.orchestrator.config.calibration_file import CONSTANTS, FORMAT_VERSION
from sporch.orchestrator.plan.calibration import FitResult
from sporch.orchestrator.plan.measured_links import LinkFigures
from sporch.orchestrator.safe_files import write_output


def write_calibration(path: str | Path, result: Optional[FitResult], meta: Mapping[str, Any], *, replace: bool = False,
                      links: Optional[LinkFigures] = None, constants: Optional[Mapping[str, float]] = None) -> Path:
    """The calibration file (YAML): metadata, fit quality, every constant of the model, and
    (``links``: a preflight's measurements) the link figures that replace the descriptor's.
    ``result`` None: no fit, the file holds ``constants`` (the cluster's, with the links'
    applied). Written by safe_files.write_output: an existing file (or link) at
    ``path`` is refused unless ``replace``; a link is replaced, never followed; nothing is
    half-written."""
    import yaml

    p = Path(path)
    consts = result.constants if result is not None else dict(constants or {})
    doc: dict[str, Any] = {"sporch_calibration": FORMAT_VERSION, **dict(meta)}
    if result is not None:
        doc.update({
            # the measured points (a generate point measures each of its phases too)
            "points": len({o.label.split(" ", 1)[0] for o in result.observations}),
            "measurements": len(result.observations),
            "fitted": list(result.fitted),
            "held": list(result.held),
            "rms_relative_error": round(result.rms_relative_error, 6),
            "max_relative_error": round(result.max_relative_error, 6),
        })
    else:
        doc.update({"points": 0, "fitted": []})
    if links is not None:
        doc["links"] = links_section(links)
    phases = measured_phases(result) if result is not None else {}
    if phases:
        doc["phases"] = phases
    doc["constants"] = {k: float(f"{consts[k]:.6g}") for k in CONSTANTS}
    text = ("# Written by `sporch calibrate`; a cluster descriptor uses it with `calibration: <this file>`.\n"
            + yaml.safe_dump(doc, sort_keys=False))
    p.parent.mkdir(parents=True, exist_ok=True)
    return write_output(p, text, force=replace)


def measured_phases(result: FitResult) -> dict[str, Any]:
    """The file's ``phases``: per phase a generate job's points measured (metrics.stages), how
    many, their mean and the calibrated prediction's mean (seconds)."""
    out: dict[str, Any] = {}
    for o, p in zip(result.observations, result.predictions):
        if o.level in ("step", "job", "all"):
            continue
        row = out.setdefault(o.level, {"points": 0, "measured_s": 0.0, "predicted_s": 0.0})
        row["points"] += 1
        row["measured_s"] += o.measured_s
        row["predicted_s"] += p
    for row in out.values():
        row["measured_s"] = float(f"{row['measured_s'] / row['points']:.6g}")
        row["predicted_s"] = float(f"{row['predicted_s'] / row['points']:.6g}")
    return out


def links_section(links: LinkFigures) -> dict[str, Any]:
    """The file's ``links``: the measured rates (which replace the descriptor's ``gb_per_s``) and,
    per figure, what it rests on; the constants it set are named under ``sets``."""
    measured = {k: {"value": float(f"{f.value:.6g}"), "measurements": f.measurements, "from": f.what}
                for k, f in links.figures().items() if f is not None}
    return {
        "preflight": links.source, "cluster": links.cluster, "backend": links.backend, "nodes": links.nodes,
        **({"measured_at": links.measured_at} if links.measured_at else {}),
        **{k: float(f"{v:.6g}") for k, v in links.rates().items()},
        "sets": sorted(links.constants()),
        "measured": measured,
    }
