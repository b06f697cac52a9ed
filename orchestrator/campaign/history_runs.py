"""A campaign directory's completed runs, read from its files alone: :class:`Run` (one completed
``result.json`` of a point) and :func:`read_runs`; what the history store records.

``digest`` is the sha256 of the result file's bytes, so recording the same file again changes
nothing and a copy of a campaign directory adds no run. ``time`` is read from the result
(``provenance.finished_at``; an older result: rank 0's ``finished`` in ``ranks/rank0.json``; else
the file's modification time), never from the clock, and ``metrics`` holds every metric of
:mod:`.metrics`. ``fingerprint`` is the result's environment fingerprint (schema 2 results).
"""

from __future__ import annotations

import hashlib
import json
import math
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Dict, List, Optional

from sporch.orchestrator.campaign.collect import read_point
from sporch.orchestrator.campaign.folder import MANIFEST_FILE, POINT_FILE, RESULT_FILE, CampaignDir
from sporch.orchestrator.campaign.metrics import METRICS, metric_value
from sporch.orchestrator.contract.results import (Fingerprint, JobResult, RankRecord, ResultFileError, rank_file,
                                                  read_bounded_text)
from sporch.orchestrator.errors import SporchError


@dataclass(frozen=True)
class Run:
    """One completed run of a point."""

    point_id: str
    digest: str  # sha256 of result.json
    campaign: str
    campaign_dir: str
    cluster: Optional[str]
    git_revision: Optional[str]
    torch_version: Optional[str]
    sporch_version: Optional[str]
    time: float  # seconds since the epoch
    job_id: Optional[str]
    values: Dict[str, Any] = field(default_factory=dict)  # the point's identifying values
    metrics: Dict[str, float] = field(default_factory=dict)  # read from a file: NaN kept; from the store: finite
    fingerprint: Optional[Fingerprint] = None  # result.json's (schema 2); None before

    def value(self, metric: str) -> Optional[float]:
        v = self.metrics.get(metric)
        return v if v is not None and math.isfinite(v) else None


def campaign_name(cdir: CampaignDir) -> str:
    """The campaign's name (manifest.json's), else the directory's name."""
    try:
        name = json.loads(read_bounded_text(cdir.root / MANIFEST_FILE)).get("name")
    except (OSError, ValueError, AttributeError):
        name = None
    return name if isinstance(name, str) and name else cdir.root.resolve().name


def read_runs(root: str | os.PathLike) -> List[Run]:
    """The completed runs in the campaign directory ``root``, from its files alone (a point
    without a completed, readable result.json is left out)."""
    cdir = CampaignDir(Path(root).resolve())
    if not cdir.root.is_dir():
        raise SporchError(f"campaign directory {root} not found")
    name = campaign_name(cdir)
    out = []
    for folder in cdir.point_dirs():
        try:
            point = read_point(folder / POINT_FILE)
            text = read_bounded_text(folder / RESULT_FILE)
            result = JobResult.from_json(text, str(folder / RESULT_FILE))
        except (FileNotFoundError, ResultFileError):
            continue
        if not result.completed:
            continue
        out.append(_run(point, result, text, folder, cdir, name))
    return out


def _run(point: dict, result: JobResult, text: str, folder: Path, cdir: CampaignDir, name: str) -> Run:
    prov = result.provenance or {}
    data = result.to_dict()
    metrics = {}
    for m in METRICS:
        v = metric_value(data, m.name)
        if v is not None:
            metrics[m.name] = v
    values = point["values"]
    cluster = result.cluster or (Path(str(values["cluster"])).stem if values.get("cluster") else None)
    return Run(point_id=point["id"], digest=hashlib.sha256(text.encode("utf-8")).hexdigest(), campaign=name,
               campaign_dir=str(cdir.root), cluster=cluster, git_revision=_text(prov.get("git_revision")),
               torch_version=_text(prov.get("torch_version")), sporch_version=_text(prov.get("sporch_version")),
               time=_finished(prov, folder), job_id=_job_id(prov), values=values, metrics=metrics,
               fingerprint=result.fingerprint)


def _text(v: Any) -> Optional[str]:
    return v if isinstance(v, str) else None


def _job_id(prov: dict) -> Optional[str]:
    array, task = prov.get("slurm_array_job_id"), prov.get("slurm_array_task_id")
    if array and task is not None:
        return f"{array}_{task}"
    return _text(prov.get("slurm_job_id"))


def _finished(prov: dict, folder: Path) -> float:
    """When the run ended, from its files: the result's, rank 0's record, the file's time."""
    t = prov.get("finished_at")
    if isinstance(t, (int, float)) and not isinstance(t, bool) and math.isfinite(t):
        return float(t)
    try:
        rec = RankRecord.load(rank_file(folder, 0))
        t = rec.finished if rec.finished is not None else rec.started
        if isinstance(t, (int, float)) and math.isfinite(t):
            return float(t)
    except (OSError, ResultFileError, TypeError):
        pass
    return (folder / RESULT_FILE).stat().st_mtime


def is_campaign(root: str | os.PathLike) -> bool:
    """Whether ``root`` is a campaign directory: its manifest.json, or a point (points/<id>/point.json)."""
    cdir = CampaignDir(Path(root))
    return cdir.manifest.is_file() or next(cdir.point_dirs(), None) is not None
