"""Rows of a campaign report, from the campaign directory's files alone.

One row per point directory (``points/<id>/point.json``): the point's identifying values,
its status (``result.json``'s, or ``pending`` without one), every metric of
:mod:`.metrics` read from ``result.json``, and each metric's reference verdict.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Optional

from sporch.orchestrator.campaign.folder import CAMPAIGN_FILE, POINT_FILE, RESULT_FILE, CampaignDir
from sporch.orchestrator.campaign.metrics import METRICS, metric_value
from sporch.orchestrator.campaign.references import (FAIL, NONE, PASS, Reference, evaluate, parse_references,
                                                     select)
from sporch.orchestrator.campaign.spec import CampaignSpec
from sporch.orchestrator.config.loading import read_yaml, to_typed
from sporch.orchestrator.contract.results import JobResult, ResultFileError
from sporch.orchestrator.errors import SporchError

#: Identifying columns, in table order.
KEY_COLUMNS = ("id", "cluster", "nodes", "gpus", "layout", "preset", "shape", "dtype", "repeat", "status")
PENDING = "pending"
COMPLETED = "completed"


@dataclass
class Row:
    id: str
    values: dict  # cluster, nodes, gpus, layout, preset, shape, dtype, repeat
    status: str
    metrics: dict = field(default_factory=dict)  # metric -> float | None
    verdicts: dict = field(default_factory=dict)  # metric -> pass | fail | none
    bounds: dict = field(default_factory=dict)  # metric -> references.Bound
    error: Optional[str] = None

    @property
    def ok(self) -> bool:
        return self.status == COMPLETED

    @property
    def verdict(self) -> str:
        """fail if any metric fails, pass if any passes (and none fails), else none."""
        vs = set(self.verdicts.values())
        return FAIL if FAIL in vs else PASS if PASS in vs else NONE

    def cell(self, column: str) -> Any:
        if column == "id":
            return self.id
        if column == "status":
            return self.status
        if column == "reference":
            return self.verdict
        if column in self.values:
            return self.values[column]
        return self.metrics.get(column)


def columns() -> list[str]:
    return list(KEY_COLUMNS) + [m.name for m in METRICS] + ["reference"]


def load_references(campaign_file: Path) -> list[Reference]:
    """The references of a campaign file (only that section is read; the base job is not loaded)."""
    if not campaign_file.is_file():
        return []
    cfg = read_yaml(campaign_file)
    spec = to_typed(CampaignSpec, [(cfg, str(campaign_file))])
    return parse_references(spec.references, str(campaign_file))


def _read(path: Path) -> Optional[dict[str, Any]]:
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError):
        return None


def read_point_result(path: Path) -> Optional[JobResult]:
    """A point's result.json; None while there is none. A broken one is a one-line error
    naming the file (a report must not quietly count it as pending)."""
    try:
        return JobResult.load(path)
    except FileNotFoundError:
        return None
    except ResultFileError as exc:
        raise SporchError(str(exc)) from None


def collect(root: str | Path, references: Optional[list[Reference]] = None) -> list[Row]:
    """Rows of the campaign directory ``root``; ``references`` default to its campaign.yaml's."""
    cdir = CampaignDir(Path(root))
    if not cdir.root.is_dir():
        raise SporchError(f"campaign directory {root} not found")
    if references is None:
        references = load_references(cdir.root / CAMPAIGN_FILE)
    rows: list[Row] = []
    for folder in cdir.point_dirs():
        point = _read(folder / POINT_FILE)
        if point is None:
            continue
        result = read_point_result(folder / RESULT_FILE)
        values = dict(point["values"])
        row = Row(id=point["id"], values=values, status=result.status if result is not None else PENDING)
        if result is not None:
            row.error = result.error
            row.metrics = {m.name: metric_value(result.to_dict(), m.name) for m in METRICS}
            if row.ok:
                row.bounds = select(references, values)
                row.verdicts = evaluate(row.bounds, row.metrics)
        rows.append(row)
    rows.sort(key=lambda r: (str(r.values["cluster"]), str(r.values["preset"]), str(r.values["shape"]),
                             str(r.values["dtype"]), r.values["gpus"], r.values["layout"], r.values["repeat"]))
    return rows


def format_value(value: Any) -> str:
    """A cell as text: the CSV's exact text (floats as Python's shortest round-trip form)."""
    if value is None:
        return ""
    if isinstance(value, float):
        return repr(value)
    return str(value)


def short_value(value: Any) -> str:
    """A cell for people (4 significant digits)."""
    if isinstance(value, float):
        return f"{value:.4g}"
    return format_value(value)
