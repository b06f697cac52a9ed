"""The campaign history store: every completed point run in one SQLite file (standard library).

Where: ``--store PATH``, else ``$SPORCH_HISTORY``, else ``$SPORCH_HOME/history.sqlite``
(``~/.local/share/sporch/history.sqlite``); ``SPORCH_HISTORY=off`` records nothing
(:func:`store_path`).

Two tables::

    runs(point_id, digest, campaign, campaign_dir, cluster, git_revision, torch_version,
         sporch_version, time, job_id, point_values, fingerprint)   primary key (point_id, digest)
    metrics(point_id, digest, metric, value)                 primary key (point_id, digest, metric)

A run (:class:`.history_runs.Run`) is keyed by its result file's digest: recording it again
changes nothing. ``metrics`` holds a run's finite metrics. ``fingerprint`` is the result's
environment fingerprint (JSON); a version 1 store gains the column when next written; read-only,
its runs have no fingerprint. A file sporch did not make is never opened as a store
(:func:`check_store`).
"""

from __future__ import annotations

import json
import math
import os
import sqlite3
import stat
from pathlib import Path
from typing import Dict, Iterable, List, Optional, Sequence, Tuple

from sporch.orchestrator.campaign.history_runs import Run
from sporch.orchestrator.contract import settings
from sporch.orchestrator.contract.results import Fingerprint
from sporch.orchestrator.safe_files import NotAFileError, read_regular
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
        raise store_error(path, exc) from None
    if writing and stat.S_ISLNK(st.st_mode):
        raise SporchError(f"history store {path} is a symbolic link; sporch never writes a store through one: "
                          "name the file itself with --store")
    try:
        head = read_regular(path, 100)
    except NotAFileError:
        raise SporchError(f"history store {path} is not a plain file; name another --store") from None
    except OSError as exc:
        raise store_error(path, exc) from None
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
            raise store_error(path, exc) from None

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
            raise store_error(path, exc) from None

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
            raise store_error(self.path, exc) from None
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
            raise store_error(self.path, exc) from None
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


def store_error(path: Path, exc: BaseException) -> SporchError:
    why = getattr(exc, "strerror", None) or str(exc)
    return SporchError(f"history store {path}: {why}")
