"""The campaign history: every completed point run in one SQLite store (standard library).

Where: ``--store PATH``, else ``$SPORCH_HISTORY``, else ``$SPORCH_HOME/history.sqlite``
(``~/.local/share/sporch/history.sqlite``); ``SPORCH_HISTORY=off`` records nothing.

Two tables::

    runs(point_id, digest, campaign, campaign_dir, cluster, git_revision, torch_version,
         sporch_version, time, job_id, point_values, fingerprint)   primary key (point_id, digest)
    metrics(point_id, digest, metric, value)                 primary key (point_id, digest, metric)

A run is one completed ``result.json``: ``digest`` is the sha256 of its bytes, so recording the
same file again changes nothing (``campaign run``, ``status`` and ``report`` record the
directory's completed points each time) and a copy of a campaign directory adds no run.
``time`` is read from the result (``provenance.finished_at``; an older result: rank 0's
``finished`` in ``ranks/rank0.json``; else the file's modification time), never from the clock,
and ``metrics`` holds every finite metric of :mod:`.metrics`: a store rebuilt from the result
files alone (:func:`rebuild`) equals the live one.

A point's history is its runs in one campaign (same campaign name, same point id), by time;
the baseline of a run is the median of the last ``k`` runs before it that have the metric
(:func:`rolling_baseline`). ``fingerprint`` is the result's environment fingerprint (JSON; schema
2 results): a point's runs fall into groups of one fingerprint, and each run names what changed
from the run before it (``NCCL 2.21.5 -> 2.23.4``). A version 1 store gains the column when next
written; read-only, its runs have no fingerprint. :func:`compare_to_baseline` holds a campaign directory's runs
against their baselines with the threshold semantics of :mod:`.compare`.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import sqlite3
import stat
import statistics
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Dict, Iterable, List, Optional, Sequence, Tuple

from sporch.orchestrator.campaign.collect import read_point
from sporch.orchestrator.campaign.compare import Change, fingerprint_change
from sporch.orchestrator.campaign.folder import MANIFEST_FILE, POINT_FILE, RESULT_FILE, CampaignDir
from sporch.orchestrator.campaign.metrics import BY_NAME, METRICS, is_worse, metric_value
from sporch.orchestrator.contract import settings
from sporch.orchestrator.contract.results import (Fingerprint, JobResult, RankRecord, ResultFileError, rank_file,
                                                  read_bounded_text)
from sporch.orchestrator.safe_files import NotAFileError, output_file, read_regular
from sporch.orchestrator.errors import SporchError
from sporch.orchestrator.jobs.store import sporch_home

STORE_FILE = "history.sqlite"
ENV = settings.HISTORY.name
#: ``$SPORCH_HISTORY`` value that turns recording off.
OFF = "off"
SCHEMA_VERSION = 2
#: Store versions this sporch reads (version 1: without the fingerprint column).
READABLE_VERSIONS = (1, 2)
#: SQLite's application id of a sporch history store ("SPhs"): a file sporch did not make is
#: never written to (:func:`check_store`).
APPLICATION_ID = 0x53506873
_SQLITE_MAGIC = b"SQLite format 3\x00"
#: Runs a baseline is the median of, by default.
DEFAULT_K = 5
#: The metric a history shows when none is asked for: the first one a point's runs have.
MAIN_METRICS = ("step_ms_median", "stage_denoise_s_per_step", "stage_denoise_s", "tokens_per_s")

_RUN_COLUMNS = ("point_id", "digest", "campaign", "campaign_dir", "cluster", "git_revision", "torch_version",
                "sporch_version", "time", "job_id", "point_values", "fingerprint")
_SCHEMA = """
CREATE TABLE IF NOT EXISTS runs (
    point_id TEXT NOT NULL, digest TEXT NOT NULL, campaign TEXT NOT NULL, campaign_dir TEXT NOT NULL,
    cluster TEXT, git_revision TEXT, torch_version TEXT, sporch_version TEXT, time REAL NOT NULL,
    job_id TEXT, point_values TEXT NOT NULL, fingerprint TEXT,
    PRIMARY KEY (point_id, digest));
CREATE INDEX IF NOT EXISTS runs_by_point ON runs (campaign, point_id, time);
CREATE TABLE IF NOT EXISTS metrics (
    point_id TEXT NOT NULL, digest TEXT NOT NULL, metric TEXT NOT NULL, value REAL NOT NULL,
    PRIMARY KEY (point_id, digest, metric));
"""


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


# -- where ------------------------------------------------------------------------------------------
def store_path(explicit: Optional[str | os.PathLike] = None) -> Optional[Path]:
    """The store's path: ``explicit``, else ``$SPORCH_HISTORY``, else under ``$SPORCH_HOME``;
    None when ``$SPORCH_HISTORY`` is ``off`` and nothing explicit is given."""
    if explicit:
        return Path(explicit).expanduser()
    env = settings.raw(settings.HISTORY) or ""
    if env.lower() == OFF:
        return None
    return Path(env).expanduser() if env else sporch_home() / STORE_FILE


def required_store_path(explicit: Optional[str | os.PathLike] = None) -> Path:
    path = store_path(explicit)
    if path is None:
        raise SporchError(f"${ENV} is {OFF!r}: no history store; name one with --store PATH")
    return path


# -- reading runs from a campaign directory ------------------------------------------------------
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


# -- the store --------------------------------------------------------------------------------------
def check_store(path: Path, *, writing: bool) -> bool:
    """Whether ``path`` holds a store (False: nothing there). Anything there must be sporch's
    own before sporch opens it: an SQLite file with sporch's application id, or one made before
    the id was set (``user_version`` 1 and exactly the tables ``runs`` and ``metrics``). A text
    file, another application's database, a FIFO or folder, and (``writing``) a symbolic link
    are refused in one line: sporch never turns a file it did not make into a store."""
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        return False
    except OSError as exc:
        raise _store_error(path, exc) from None
    if writing and stat.S_ISLNK(st.st_mode):
        raise SporchError(f"history store {path} is a symbolic link; sporch never writes a store through one: "
                          "name the file itself with --store")
    try:
        head = read_regular(path, 100)
    except NotAFileError:
        raise SporchError(f"history store {path} is not a plain file; name another --store") from None
    except OSError as exc:
        raise _store_error(path, exc) from None
    if len(head) < 100 or not head.startswith(_SQLITE_MAGIC):
        raise SporchError(f"{path} is not a sporch history store (not an SQLite database); sporch leaves it as it "
                          "is: name another --store (or $SPORCH_HISTORY)")
    app_id, user_version = int.from_bytes(head[68:72], "big"), int.from_bytes(head[60:64], "big")
    if app_id == APPLICATION_ID:
        return True
    if app_id == 0 and user_version == 1 and _tables(path) == {"runs", "metrics"}:
        return True  # a store of before the application id
    raise SporchError(f"{path} is not a sporch history store (an SQLite database of another application); "
                      "sporch leaves it as it is: name another --store (or $SPORCH_HISTORY)")


def _tables(path: Path) -> set:
    try:
        conn = sqlite3.connect(path.resolve().as_uri() + "?mode=ro", uri=True, timeout=30)
        try:
            return {r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
        finally:
            conn.close()
    except sqlite3.Error:
        return set()


class Store:
    """An open history store; use as a context manager."""

    def __init__(self, path: Path, conn: sqlite3.Connection) -> None:
        self.path, self.conn = path, conn

    def __enter__(self) -> "Store":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def close(self) -> None:
        self.conn.close()

    @classmethod
    def create(cls, path: str | os.PathLike) -> "Store":
        """Open ``path`` for writing, creating the file (and its folder) when missing."""
        path = Path(path)
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise SporchError(f"history store {path}: cannot create its folder ({exc.strerror or exc})") from None
        existed = check_store(path, writing=True)
        conn = None
        try:
            conn = sqlite3.connect(str(path), timeout=30)
            store = cls(path, conn)
            store._check_version(empty_ok=not existed)
            with conn:
                conn.executescript(_SCHEMA)
                if not store._has_fingerprint():  # a version 1 store: the column added, nothing else changes
                    conn.execute("ALTER TABLE runs ADD COLUMN fingerprint TEXT")
                conn.execute(f"PRAGMA user_version = {SCHEMA_VERSION}")
                conn.execute(f"PRAGMA application_id = {APPLICATION_ID}")
            return store
        except (sqlite3.Error, OSError) as exc:
            if conn is not None:
                conn.close()
            if not existed:  # a store this call began (a full disk): no half-made file left behind
                for leftover in (path, path.with_name(path.name + "-journal")):
                    leftover.unlink(missing_ok=True)
            raise _store_error(path, exc) from None

    @classmethod
    def open(cls, path: str | os.PathLike) -> "Store":
        """Open an existing store read-only; a one-line SporchError when there is none."""
        path = Path(path)
        if not check_store(path, writing=False):
            raise SporchError(f"no history store at {path}: `sporch campaign run`, `status` and `report` record "
                              "completed points; rebuild it from result files with `sporch campaign history "
                              "--rebuild DIR...`")
        try:
            conn = sqlite3.connect(path.resolve().as_uri() + "?mode=ro", uri=True, timeout=30)
            store = cls(path, conn)
            store._check_version(empty_ok=False)
            return store
        except sqlite3.Error as exc:
            raise _store_error(path, exc) from None

    def _check_version(self, empty_ok: bool) -> None:
        version = self.conn.execute("PRAGMA user_version").fetchone()[0]
        tables = {r[0] for r in self.conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
        if version == 0 and not tables and empty_ok:
            return
        if version not in READABLE_VERSIONS or not {"runs", "metrics"} <= tables:
            self.conn.close()
            raise SporchError(f"{self.path} is not a sporch history store of version {SCHEMA_VERSION} "
                              f"(user_version {version}); move it away or rebuild it with "
                              "`sporch campaign history --rebuild DIR...`")

    def _has_fingerprint(self) -> bool:
        return any(row[1] == "fingerprint" for row in self.conn.execute("PRAGMA table_info(runs)"))

    def record(self, runs: Iterable[Run]) -> int:
        """Add ``runs`` (one already there is left as it is); returns how many were new."""
        added = 0
        try:
            with self.conn:
                for r in runs:
                    cur = self.conn.execute(
                        f"INSERT OR IGNORE INTO runs ({', '.join(_RUN_COLUMNS)}) VALUES "
                        f"({', '.join('?' * len(_RUN_COLUMNS))})",
                        (r.point_id, r.digest, r.campaign, r.campaign_dir, r.cluster, r.git_revision,
                         r.torch_version, r.sporch_version, r.time, r.job_id,
                         json.dumps(r.values, sort_keys=True, default=str),
                         r.fingerprint.to_json() if r.fingerprint is not None else None))
                    if cur.rowcount != 1:
                        continue
                    added += 1
                    self.conn.executemany(
                        "INSERT OR IGNORE INTO metrics (point_id, digest, metric, value) VALUES (?, ?, ?, ?)",
                        [(r.point_id, r.digest, m, v) for m, v in sorted(r.metrics.items()) if math.isfinite(v)])
        except sqlite3.Error as exc:
            raise _store_error(self.path, exc) from None
        return added

    def runs(self, point_ids: Optional[Sequence[str]] = None, campaign: Optional[str] = None) -> List[Run]:
        """Runs (of ``point_ids``, of ``campaign``), by campaign, point and time."""
        where, args = [], []
        if point_ids is not None:
            where.append(f"r.point_id IN ({', '.join('?' * len(point_ids))})")
            args += list(point_ids)
        if campaign is not None:
            where.append("r.campaign = ?")
            args.append(campaign)
        cond = f" WHERE {' AND '.join(where)}" if where else ""
        try:
            cols = [("r." + c) if c != "fingerprint" or self._has_fingerprint() else "NULL" for c in _RUN_COLUMNS]
            rows = self.conn.execute(f"SELECT {', '.join(cols)} FROM runs r{cond} "
                                     "ORDER BY r.campaign, r.point_id, r.time, r.digest", args).fetchall()
            metrics: Dict[Tuple[str, str], Dict[str, float]] = {}
            for pid, digest, m, v in self.conn.execute(
                    "SELECT m.point_id, m.digest, m.metric, m.value FROM metrics m JOIN runs r "
                    f"ON m.point_id = r.point_id AND m.digest = r.digest{cond}", args):
                metrics.setdefault((pid, digest), {})[m] = v
        except sqlite3.Error as exc:
            raise _store_error(self.path, exc) from None
        return [Run(*row[:10], values=json.loads(row[10]), metrics=metrics.get((row[0], row[1]), {}),
                    fingerprint=Fingerprint.from_json(row[11], "history store") if row[11] else None)
                for row in rows]

    def dump(self) -> Tuple[List[tuple], List[tuple]]:
        """Every row of both tables, sorted: what two stores are compared by."""
        cols = [c if c != "fingerprint" or self._has_fingerprint() else "NULL" for c in _RUN_COLUMNS]
        return (sorted(self.conn.execute(f"SELECT {', '.join(cols)} FROM runs").fetchall()),
                sorted(self.conn.execute("SELECT point_id, digest, metric, value FROM metrics").fetchall()))

    def count(self) -> Tuple[int, int]:
        """(runs, distinct points)."""
        return self.conn.execute("SELECT count(*), count(DISTINCT point_id) FROM runs").fetchone()


def _store_error(path: Path, exc: BaseException) -> SporchError:
    why = getattr(exc, "strerror", None) or str(exc)
    return SporchError(f"history store {path}: {why}")


def record_dir(root: str | os.PathLike, path: str | os.PathLike) -> int:
    """Record the completed points of campaign directory ``root`` into the store at ``path``."""
    runs = read_runs(root)
    with Store.create(path) as store:
        return store.record(runs)


def record_quietly(root: str | os.PathLike, explicit: Optional[str | os.PathLike] = None) -> Optional[str]:
    """:func:`record_dir` into the default store (nothing when recording is off); a problem is
    returned as a warning line, never raised: a campaign runs and reports without its history."""
    path = store_path(explicit)
    if path is None:
        return None
    try:
        record_dir(root, path)
    except (SporchError, OSError, sqlite3.Error) as exc:
        return f"history not recorded ({exc})"
    return None


def is_campaign(root: str | os.PathLike) -> bool:
    """Whether ``root`` is a campaign directory: its manifest.json, or a point (points/<id>/point.json)."""
    cdir = CampaignDir(Path(root))
    return cdir.manifest.is_file() or next(cdir.point_dirs(), None) is not None


def rebuild(dirs: Sequence[str | os.PathLike], path: str | os.PathLike) -> Dict[str, int]:
    """Re-create the store at ``path`` from the result files of the campaign directories
    ``dirs`` alone; returns the runs found per directory. A directory that is not a campaign,
    or directories that hold no completed run, are refused (the store is left as it is); a
    file at ``path`` that is not a sporch store is never touched. The new store is made in a
    private folder beside ``path`` and renamed over it only when complete."""
    path = Path(path)
    for d in dirs:
        if not Path(d).is_dir():
            raise SporchError(f"campaign directory {d} not found")
        if not is_campaign(d):
            raise SporchError(f"{d} is not a campaign directory (no manifest.json, no points/<id>/point.json); "
                              "--rebuild reads the folders `sporch campaign run` made; the store is left as it is")
    found = {str(d): read_runs(d) for d in dirs}  # every directory is read before anything is written
    if not any(found.values()):
        raise SporchError(f"{', '.join(map(str, dirs))} hold(s) no completed run: a rebuild from them would empty "
                          f"the store; {path} is left as it is")
    check_store(path, writing=True)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        with output_file(path, replace=True) as tmp:
            with Store.create(tmp) as store:
                for runs in found.values():
                    store.record(runs)
    except OSError as exc:
        raise _store_error(path, exc) from None
    return {d: len(runs) for d, runs in found.items()}


# -- trends and baselines ---------------------------------------------------------------------------
def histories(runs: Iterable[Run]) -> Dict[Tuple[str, str], List[Run]]:
    """(campaign, point id) -> its runs by time."""
    out: Dict[Tuple[str, str], List[Run]] = {}
    for r in runs:
        out.setdefault((r.campaign, r.point_id), []).append(r)
    for lst in out.values():
        lst.sort(key=lambda r: (r.time, r.digest))
    return out


def main_metric(runs: Sequence[Run]) -> str:
    """The metric a history shows by default: the first of :data:`MAIN_METRICS` the runs have."""
    for m in MAIN_METRICS:
        if any(r.value(m) is not None for r in runs):
            return m
    return MAIN_METRICS[0]


def rolling_baseline(values: Sequence[Optional[float]], k: int) -> List[Optional[float]]:
    """For each value, the median of the last ``k`` values before it that are numbers (None
    when there is none)."""
    out: List[Optional[float]] = []
    seen: List[float] = []
    for v in values:
        out.append(statistics.median(seen[-k:]) if seen else None)
        if v is not None:
            seen.append(v)
    return out


@dataclass(frozen=True)
class Entry:
    """One run of a point's trend: its value of the metric and its baseline."""

    run: Run
    value: Optional[float]
    baseline: Optional[float]
    regressed: bool

    @property
    def ratio(self) -> Optional[float]:
        return self.value / self.baseline if self.value is not None and self.baseline else None


def trend(runs: Sequence[Run], metric: str, k: int = DEFAULT_K, threshold: float = 0.05) -> List[Entry]:
    """``runs`` (one point's, by time) with the metric, its rolling baseline, and whether it is
    worse than the baseline by more than ``threshold``."""
    values = [r.value(metric) for r in runs]
    return [Entry(r, v, b, v is not None and b is not None and is_worse(metric, v, b, threshold))
            for r, v, b in zip(runs, values, rolling_baseline(values, k))]


@dataclass
class BaselineComparison:
    changes: List[Change]  # Change.old: the baseline
    compared: int  # points that have a baseline
    without: List[str]  # completed points with no earlier run in the store
    campaign: str


def compare_to_baseline(root: str | os.PathLike, store: Store, k: int, threshold: float) -> BaselineComparison:
    """Each completed point of ``root`` against the median of its last ``k`` earlier runs in
    the store (same campaign, earlier time, another result file), metric by metric as
    :func:`.compare.compare` does: worse by more than ``threshold``, or a metric the baseline
    has that this run lacks or holds as NaN or an infinity."""
    current = read_runs(root)
    if not current:
        raise SporchError(f"{root} has no completed point to compare with its baseline")
    name = current[0].campaign
    past = histories(store.runs(point_ids=sorted({r.point_id for r in current}), campaign=name))
    out = BaselineComparison([], 0, [], name)
    for run in sorted(current, key=lambda r: r.point_id):
        earlier = [p for p in past.get((name, run.point_id), []) if p.time < run.time and p.digest != run.digest]
        if not earlier:
            out.without.append(run.point_id)
            continue
        out.compared += 1
        for m in METRICS:
            if m.name == "ideal_ms_per_step":
                continue
            seen = [v for v in (p.value(m.name) for p in earlier) if v is not None][-k:]
            if not seen:
                continue
            base = statistics.median(seen)
            new = run.metrics.get(m.name)
            if new is None or not math.isfinite(new) or is_worse(m.name, new, base, threshold):
                # what changed in the fingerprint since the last earlier run that has one
                last = next((p for p in reversed(earlier) if p.fingerprint is not None), None)
                out.changes.append(Change(run.point_id, run.values, m.name, base, new,
                                          *fingerprint_change(last, run)))
    return out


def check_metric(name: Optional[str]) -> Optional[str]:
    if name is not None and name not in BY_NAME:
        raise SporchError(f"--metric {name!r} is not a campaign metric; one of: {', '.join(BY_NAME)}")
    return name


def when(t: float) -> str:
    """A run's time for people: UTC, to the second."""
    return datetime.fromtimestamp(t, timezone.utc).strftime("%Y-%m-%d %H:%M:%S")


def short_revision(rev: Optional[str]) -> str:
    """A git revision cut to 10 hex digits, ``-dirty`` kept."""
    if not rev:
        return ""
    dirty = rev.endswith("-dirty")
    return rev[:10] + ("-dirty" if dirty else "")


def trend_doc(runs: Sequence[Run], metric: Optional[str] = None, k: int = DEFAULT_K, threshold: float = 0.05,
              last: Optional[int] = None) -> Dict[str, Any]:
    """One point's trend as plain data (``history --json``, the report's history section and
    its plot): the point, the metric and, per run (the last ``last``), its provenance, value,
    baseline, ratio and whether it regressed."""
    metric = metric or main_metric(runs)
    entries = trend(runs, metric, k, threshold)
    if last:
        entries = entries[-last:]
    latest = runs[-1]
    changed = fingerprint_changes([e.run for e in trend(runs, metric, k, threshold)])
    if last:
        changed = changed[-last:]
    return {
        "id": latest.point_id, "campaign": latest.campaign, "values": latest.values, "metric": metric,
        "unit": BY_NAME[metric].unit, "better": BY_NAME[metric].better, "k": k, "threshold": threshold,
        "total_runs": len(runs),
        "runs": [{"time": e.run.time, "when": when(e.run.time), "campaign_dir": e.run.campaign_dir,
                  "cluster": e.run.cluster, "git_revision": e.run.git_revision,
                  "torch_version": e.run.torch_version, "sporch_version": e.run.sporch_version,
                  "job_id": e.run.job_id, "digest": e.run.digest, "value": e.value, "baseline": e.baseline,
                  "ratio": e.ratio, "regressed": e.regressed, "fingerprint_group": group,
                  "changed": what} for e, (group, what) in zip(entries, changed)],
    }


def fingerprint_changes(runs: Sequence[Run]) -> List[Tuple[Optional[int], List[str]]]:
    """Per run (in order): its fingerprint group (runs of one fingerprint share a number, counted
    from 1 as new fingerprints appear; None without one) and what changed from the last earlier
    run that has a fingerprint (``["NCCL 2.21.5 -> 2.23.4"]``; empty: nothing, or no earlier one)."""
    groups: List[Fingerprint] = []
    previous: Optional[Fingerprint] = None
    out: List[Tuple[Optional[int], List[str]]] = []
    for r in runs:
        fp = r.fingerprint
        if fp is None:
            out.append((None, []))
            continue
        if fp not in groups:
            groups.append(fp)
        out.append((groups.index(fp) + 1, previous.differences(fp) if previous is not None else []))
        previous = fp
    return out


def describe(values: Dict[str, Any]) -> str:
    """A point's identifying values in one line: ``local 4 GPUs 1x1x2x2 tiny 9x64x64 float32 r0``."""
    v = values
    parts = [str(v.get("cluster") or ""), f"{v['gpus']} GPUs" if v.get("gpus") not in (None, "") else "",
             str(v.get("layout") or ""), str(v.get("preset") or ""), str(v.get("shape") or ""),
             str(v.get("dtype") or ""), f"r{v['repeat']}" if v.get("repeat") not in (None, "") else ""]
    return " ".join(p for p in parts if p)
