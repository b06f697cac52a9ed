"""Rows of a campaign report, from the campaign directory's files alone.

One row per point directory (``points/<id>/point.json``): the point's identifying values,
its status (``result.json``'s, or ``pending`` without one), every metric of
:mod:`.metrics` read from ``result.json`` (a generate point's per-stage figures too), and each
metric's reference verdict.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Optional, Sequence

from sporch.orchestrator.campaign.folder import CAMPAIGN_FILE, POINT_FILE, RESULT_FILE, CampaignDir
from sporch.orchestrator.campaign import outputs, pareto
from sporch.orchestrator.campaign.metrics import (CACHE_METRICS, METRICS, OUTPUT_METRICS, PREDICTED_METRICS,
                                                  STAGE_METRICS, STEP_METRICS, metric_value)
from sporch.orchestrator.campaign.predicted_phases import predicted_metrics
from sporch.orchestrator.campaign.references import (FAIL, NONE, PASS, Reference, evaluate, parse_references,
                                                     select)
from sporch.orchestrator.campaign.spec import CampaignSpec
from sporch.orchestrator.config.loading import read_yaml, to_typed
from sporch.orchestrator.contract.results import Fingerprint, JobResult, ResultFileError, read_bounded_text
from sporch.orchestrator.errors import SporchError

#: The speed levers a campaign may sweep (expand.point_values), shown after dtype when swept.
LEVER_COLUMNS = ("cache", "quant", "attention", "steps", "recipe")
#: Identifying columns, in table order.
KEY_COLUMNS = ("id", "cluster", "nodes", "gpus", "layout", "preset", "shape", "dtype", "repeat", "status")
PENDING = "pending"
COMPLETED = "completed"
#: Status of a point whose point.json or result.json cannot be read (the row's error says why).
UNREADABLE = "unreadable"


@dataclass
class Row:
    id: str
    values: dict  # cluster, nodes, gpus, layout, preset, shape, dtype, repeat
    status: str
    metrics: dict = field(default_factory=dict)  # metric -> float | None
    verdicts: dict = field(default_factory=dict)  # metric -> pass | fail | none
    bounds: dict = field(default_factory=dict)  # metric -> references.Bound
    error: Optional[str] = None
    #: why this generate point's outputs were not compared with the reference point (.outputs)
    output_note: Optional[str] = None
    #: the id of the point its outputs were compared with
    output_ref: Optional[str] = None
    #: what decided the run's speed besides its plan (result.json's fingerprint; None before schema 2)
    fingerprint: Optional[Fingerprint] = None

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


def columns(rows: Sequence[Row] = ()) -> list[str]:
    """Table columns: the key columns, every step metric, the stage metrics (generate points)
    that some row of ``rows`` has or has a reference for, and the verdict. A benchmark campaign
    gets no stage column."""
    extra = [m.name for m in STAGE_METRICS + CACHE_METRICS + OUTPUT_METRICS + PREDICTED_METRICS
             if any(has_metric(r, m.name) for r in rows)]
    keys = list(KEY_COLUMNS)
    at = keys.index("dtype") + 1
    for lever in reversed(LEVER_COLUMNS):  # a campaign sweeping caches, quants, ... (in this order)
        if any(r.values.get(lever) not in (None, "") for r in rows):
            keys.insert(at, lever)
    if any(r.values.get(pareto.COLUMN) for r in rows):
        keys.append(pareto.COLUMN)
    return keys + [m.name for m in STEP_METRICS] + extra + ["reference"]


def has_metric(row: Row, name: str) -> bool:
    """Whether ``row`` measured ``name`` or has a reference for it (a missing measurement fails)."""
    return row.metrics.get(name) is not None or name in row.bounds


def _campaign_spec(campaign_file: Path) -> Optional[CampaignSpec]:
    if not campaign_file.is_file():
        return None
    return to_typed(CampaignSpec, [(read_yaml(campaign_file), str(campaign_file))])


def load_references(campaign_file: Path) -> list[Reference]:
    """The references of a campaign file (only that section is read; the base job is not loaded)."""
    spec = _campaign_spec(campaign_file)
    return [] if spec is None else parse_references(spec.references, str(campaign_file))


def load_output_reference(campaign_file: Path) -> Optional[str]:
    """``compare_outputs.reference`` of a campaign file (None: the fewest-GPU point)."""
    spec = _campaign_spec(campaign_file)
    ref = None if spec is None else spec.compare_outputs.reference
    return None if ref is None else str(ref)


def read_point(path: Path) -> dict[str, Any]:
    """A point.json: ``id`` (text) and ``values`` (an object); ResultFileError naming the file
    when it is anything else."""
    try:
        data = json.loads(read_bounded_text(path))
    except FileNotFoundError:
        raise ResultFileError(f"{path}: missing") from None
    except ValueError as exc:
        if isinstance(exc, ResultFileError):
            raise
        raise ResultFileError(f"{path}: not valid JSON ({exc})") from None
    if not isinstance(data, dict):
        raise ResultFileError(f"{path}: expected a JSON object, got {type(data).__name__}")
    if not isinstance(data.get("id"), str) or not isinstance(data.get("values"), dict):
        raise ResultFileError(f"{path}: needs 'id' (text) and 'values' (an object); prepare the campaign again")
    return data


def read_point_result(path: Path) -> Optional[JobResult]:
    """A point's result.json; None while there is none. ResultFileError when it is broken (the
    report shows the point as unreadable, never quietly as pending)."""
    try:
        return JobResult.load(path)
    except FileNotFoundError:
        return None


def _values(values: dict) -> dict:
    """A point's identifying values with every key column present (blank when point.json lacks it)."""
    out = {c: "" for c in KEY_COLUMNS if c not in ("id", "status")}
    out.update(values)
    return out


def _sort_key(r: "Row") -> tuple:
    v = r.values
    return tuple(str(v.get(k, "")) for k in ("cluster", "preset", "shape", "dtype", *LEVER_COLUMNS)) + tuple(
        (0, x, "") if isinstance(x, (int, float)) and not isinstance(x, bool) else (1, 0, str(x))
        for x in (v.get("gpus"), v.get("layout"), v.get("repeat")))


def collect(root: str | Path, references: Optional[list[Reference]] = None,
            output_reference: Optional[str] = None) -> list[Row]:
    """Rows of the campaign directory ``root``; ``references`` (and ``output_reference``, the
    reference point of the same-output metrics) default to its campaign.yaml's."""
    cdir = CampaignDir(Path(root))
    if not cdir.root.is_dir():
        raise SporchError(f"campaign directory {root} not found")
    if references is None:
        references = load_references(cdir.root / CAMPAIGN_FILE)
    if output_reference is None:
        output_reference = load_output_reference(cdir.root / CAMPAIGN_FILE)
    rows: list[Row] = []
    folders: dict[str, Path] = {}
    results: dict[str, dict] = {}
    for folder in cdir.point_dirs():
        try:
            point = read_point(folder / POINT_FILE)
        except ResultFileError as exc:
            rows.append(Row(id=folder.name, values=_values({}), status=UNREADABLE, error=str(exc)))
            continue
        values = _values(point["values"])
        try:
            result = read_point_result(folder / RESULT_FILE)
        except ResultFileError as exc:
            rows.append(Row(id=point["id"], values=values, status=UNREADABLE, error=str(exc)))
            continue
        row = Row(id=point["id"], values=values, status=result.status if result is not None else PENDING)
        if result is not None:
            row.error = result.error
            row.fingerprint = result.fingerprint
            data = result.to_dict()
            row.metrics = {m.name: metric_value(data, m.name) for m in METRICS}
            row.metrics.update(predicted_metrics(cdir.plan_file(row.id)))
            folders[row.id], results[row.id] = folder, data
        rows.append(row)
    rows.sort(key=_sort_key)
    outputs.fill(rows, folders, results, output_reference)
    pareto.mark(rows)
    for row in rows:
        row.bounds = select(references, row.values)
        if row.ok:
            row.verdicts = evaluate(row.bounds, row.metrics)
        elif row.status != PENDING:
            # a point that ran and did not complete (failed, cancelled, unreadable) fails every
            # reference it has: a reproduction whose runs broke has not reproduced anything
            row.verdicts = {name: FAIL for name in row.bounds}
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
