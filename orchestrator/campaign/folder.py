"""The campaign directory: the one place that names its files.

::

    <dir>/campaign.yaml              the campaign file as given (copied at prepare time)
    <dir>/base.yaml                  the base job file, when the campaign names one by path
    <dir>/manifest.json              points (id -> params, values, group), groups, skipped points
    <dir>/points/<id>/               the point's job dir (SPORCH_JOB_DIR of its run):
        point.json                   id, params, values, group (written at prepare time)
        plan.json                    the Plan (runtime input)
        result.json, ranks/, checkpoint/, logs/    written by the run (orchestrator/contract/results.py)
    <dir>/arrays/<group>.<n>.list    point dirs of submission n of a group, one per line;
                                     line i+1 is the point of SLURM_ARRAY_TASK_ID i
    <dir>/arrays/<group>.<n>.sbatch  the job-array script for that list (arrays.render_array)
    <dir>/arrays/logs/               batch logs of the array tasks (%A_%a.out / .err)
    <dir>/state.json, <dir>/.lock    the runner's state and lock (campaign run)
    <dir>/.state.lock                the state file's lock (runner shared, saving status exclusive)
    <dir>/report/                    campaign report: table.csv, *.png, plots.json, report.html,
                                     history.json (campaign.history_view: runs of the points over time)

The report reads only ``points/*/point.json`` and ``points/*/result.json``.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterator

from sporch.orchestrator import __version__
from sporch.orchestrator.campaign.groups import group_points
from sporch.orchestrator.contract.results import write_json_atomic
from sporch.orchestrator.safe_files import is_no_room, write_atomic
from sporch.orchestrator.errors import SporchError

CAMPAIGN_FILE = "campaign.yaml"
BASE_FILE = "base.yaml"
MANIFEST_FILE = "manifest.json"
POINTS_DIR = "points"
POINT_FILE = "point.json"
PLAN_FILE = "plan.json"
RESULT_FILE = "result.json"
ARRAYS_DIR = "arrays"
STATE_FILE = "state.json"
LOCK_FILE = ".lock"
REPORT_DIR = "report"


@dataclass(frozen=True)
class CampaignDir:
    root: Path

    @property
    def manifest(self) -> Path:
        return self.root / MANIFEST_FILE

    @property
    def state(self) -> Path:
        return self.root / STATE_FILE

    @property
    def lock(self) -> Path:
        return self.root / LOCK_FILE

    @property
    def arrays(self) -> Path:
        return self.root / ARRAYS_DIR

    @property
    def report(self) -> Path:
        return self.root / REPORT_DIR

    def point_dir(self, pid: str) -> Path:
        return self.root / POINTS_DIR / pid

    def plan_file(self, pid: str) -> Path:
        return self.point_dir(pid) / PLAN_FILE

    def result_file(self, pid: str) -> Path:
        return self.point_dir(pid) / RESULT_FILE

    def array_files(self, group: str, submission: int) -> tuple[Path, Path]:
        """(list file, sbatch script) of submission number ``submission`` of ``group``."""
        stem = self.arrays / f"{group}.{submission}"
        return stem.with_name(stem.name + ".list"), stem.with_name(stem.name + ".sbatch")

    def point_dirs(self) -> Iterator[Path]:
        folder = self.root / POINTS_DIR
        if folder.is_dir():
            yield from sorted(d for d in folder.iterdir() if (d / POINT_FILE).is_file())

    def has_result(self, pid: str) -> bool:
        return self.result_file(pid).is_file()


def prepare(expansion, root: str | Path) -> CampaignDir:
    """Create or update the campaign directory for ``expansion`` (expand.Expansion).

    Writes ``campaign.yaml`` (and ``base.yaml``), ``manifest.json`` and, for every point,
    ``point.json`` + ``plan.json``. A point that already has a ``result.json`` keeps its
    files untouched, so re-preparing after adding points to the matrix keeps old results.
    """
    try:
        return _prepare(expansion, CampaignDir(Path(root)))
    except OSError as exc:
        if not is_no_room(exc):
            raise
        raise SporchError(f"cannot prepare the campaign directory {root} ({exc.strerror}); free some space (or set "
                          "output_dir to another file system) and run again: every file written is whole, and "
                          "points with a result keep it") from None


def _prepare(expansion, cdir: CampaignDir) -> CampaignDir:
    cdir.root.mkdir(parents=True, exist_ok=True)
    spec = expansion.campaign.spec
    if spec.source:
        write_atomic(cdir.root / CAMPAIGN_FILE, Path(spec.source).read_bytes(), fsync=False)
    if expansion.campaign.base.source:
        write_atomic(cdir.root / BASE_FILE, Path(expansion.campaign.base.source).read_bytes(), fsync=False)
    groups = group_points(expansion.points)
    points: dict[str, Any] = {}
    for g in groups:
        for p in g.points:
            record = {"id": p.id, "params": p.params, "values": p.match_values(), "group": g.key}
            points[p.id] = record
            if cdir.has_result(p.id):
                continue
            write_json_atomic(cdir.point_dir(p.id) / POINT_FILE, record)
            write_atomic(cdir.plan_file(p.id), p.plan.to_json(), fsync=False)
    write_json_atomic(cdir.manifest, {
        "name": spec.name,
        "sporch_version": __version__,
        "source": spec.source,
        "points": points,
        "groups": {g.key: {"shape": g.shape, "points": [p.id for p in g.points]} for g in groups},
        "skipped": [{"params": s.params, "reason": s.reason} for s in expansion.skipped],
    })
    return cdir


def read_json(path: Path) -> Any:
    return json.loads(Path(path).read_text(encoding="utf-8"))
