"""Job records: one JSON file per submission, so later commands know a job by id or name.

Records live in ``$SPORCH_HOME/jobs/<id>.json`` (default ``~/.local/share/sporch``), with a
copy in ``<job_dir>/record.json``. A sporch id is ``<name>-<YYYYmmdd-HHMMSS>`` (plus ``-2``,
``-3``... when two submissions share a second). Lookup (:func:`find`) takes a sporch id, a
Slurm job id or a job name (the latest submission of that name).

Standard library only (a record's job-dir copy is written through its Host).
"""

from __future__ import annotations

import datetime as _dt
import json
import os
import re
import tempfile
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import Any, Dict, List, Optional

from sporch.orchestrator.errors import SporchError
from sporch.orchestrator.host import Host, host_for
from sporch.orchestrator.contract import settings
from sporch.orchestrator.contract.job_files import RECORD_FILE, JobFiles

SCHEMA = 1
#: What ``backend_job_id`` was called in records written before it was renamed (read, never written).
OLD_ID_KEY = "slurm_job_id"


def sporch_home() -> Path:
    """``$SPORCH_HOME`` or ``~/.local/share/sporch``."""
    return settings.read(settings.HOME)


def jobs_dir() -> Path:
    return sporch_home() / "jobs"


@dataclass
class JobRecord:
    """What sporch remembers about one submission.

    ``logs`` maps ``batch_out``/``batch_err``/``rank_out``/``rank_err`` to paths relative to
    ``job_dir`` with ``{job_id}`` and ``{rank}`` placeholders (they differ per backend).
    ``final`` caches the job's last known terminal status (state, exit code, failed rank,
    error, elapsed, nodes) so that finished jobs are not asked about again.
    """

    id: str
    name: str
    cluster: str
    backend: str  # "submitit" | "sbatch" | "local"
    #: the backend's id of the job: the Slurm job id (submitit, sbatch), or the process id of the
    #: local supervisor (local). Records written before it was named so carry ``slurm_job_id``.
    backend_job_id: str
    job_dir: str
    submitted: str  # ISO time, local
    command: List[str] = field(default_factory=list)
    world_size: int = 0
    nodes: int = 0
    workload: str = ""
    logs: Dict[str, str] = field(default_factory=dict)
    cancelled: Optional[str] = None  # ISO time of `sporch cancel`
    final: Optional[Dict[str, Any]] = None
    #: submitted over ssh: the cluster's login section (host, port, user, identity_file,
    #: known_hosts, host_key_policy, setup, workdir); ``job_dir`` is a path on that host
    remote: Optional[Dict[str, Any]] = None
    schema: int = SCHEMA

    def to_dict(self) -> Dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: Dict[str, Any]) -> "JobRecord":
        """A record from its JSON; ValueError naming the first key of the wrong kind."""
        if not isinstance(d, dict):
            raise ValueError(f"expected a JSON object, got {type(d).__name__}")
        if OLD_ID_KEY in d and "backend_job_id" not in d:  # a record written by an older sporch
            d = {("backend_job_id" if k == OLD_ID_KEY else k): v for k, v in d.items()}
        kinds = {"str": str, "int": int, "List": list, "Dict": dict}
        for f in fields(cls):
            if f.name not in d:
                continue
            hint = str(f.type)
            v = d[f.name]
            if v is None and hint.startswith("Optional"):
                continue
            base = hint.removeprefix("Optional[").split("[")[0].rstrip("]")
            want = kinds.get(base)
            if want is not None and (not isinstance(v, want) or isinstance(v, bool)):
                raise ValueError(f"'{f.name}' is a {type(v).__name__}, expected {base}")
        known = {f.name for f in fields(cls)}
        return cls(**{k: v for k, v in d.items() if k in known})

    def log_path(self, kind: str, rank: Optional[int] = None) -> Path:
        """Absolute path of a log: kind in batch_out, batch_err, rank_out, rank_err."""
        pattern = self.logs.get(kind)
        if not pattern:
            raise SporchError(f"job {self.id}: no {kind} log known for backend {self.backend}")
        rel = pattern.format(job_id=self.backend_job_id, rank=0 if rank is None else rank)
        return Path(self.job_dir) / rel


def make_id(name: str, when: _dt.datetime) -> str:
    return f"{name}-{when.strftime('%Y%m%d-%H%M%S')}"


def unique_id(base: str, home: Optional[Path] = None) -> str:
    """``base``, or ``base-2``, ``base-3``... when a record of that id exists."""
    folder = (home / "jobs") if home is not None else jobs_dir()
    candidate, n = base, 1
    while (folder / f"{candidate}.json").exists():
        n += 1
        candidate = f"{base}-{n}"
    return candidate


def _write_json_atomic(path: Path, data: Any) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            json.dump(data, fh, indent=2)
            fh.write("\n")
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise


def _claim(base: str, data_of: Any) -> tuple[str, Path]:
    """Create ``jobs/<id>.json`` for a new id (``base``, ``base-2``...) exclusively: the complete
    file is written aside and hard-linked into place, which fails when the name is taken, so
    processes saving at the same second never overwrite each other's records."""
    folder = jobs_dir()
    folder.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{base}.", suffix=".new", dir=folder)
    os.close(fd)
    try:
        n = 1
        while True:
            candidate = base if n == 1 else f"{base}-{n}"
            path = folder / f"{candidate}.json"
            if not path.exists():
                Path(tmp).write_text(json.dumps(data_of(candidate), indent=2) + "\n", encoding="utf-8")
                try:
                    os.link(tmp, path)
                    return candidate, path
                except FileExistsError:
                    pass
            n += 1
    finally:
        os.unlink(tmp)


def save_new(record: JobRecord, *, host: Optional[Host] = None) -> Path:
    """Save a new submission's record under a fresh id (``record.id`` is the wanted one; it is
    set to the id claimed), then as :func:`save` does."""
    record.id, path = _claim(record.id, lambda rid: {**record.to_dict(), "id": rid})
    _copy_to_job_dir(record, host)
    return path


def save(record: JobRecord, *, job_dir_copy: bool = True, host: Optional[Host] = None) -> Path:
    """Write the record (atomically) under ``$SPORCH_HOME/jobs`` and, by default, into its job dir
    on ``host`` (default: the record's: this machine, or its login host)."""
    path = jobs_dir() / f"{record.id}.json"
    _write_json_atomic(path, record.to_dict())
    if job_dir_copy:
        _copy_to_job_dir(record, host)
    return path


def _copy_to_job_dir(record: JobRecord, host: Optional[Host]) -> None:
    host = host or host_for(record.remote)
    try:  # best effort: the home copy is the authority
        if host.exists(record.job_dir):
            host.write_text(JobFiles(record.job_dir).record, json.dumps(record.to_dict(), indent=2) + "\n")
    except (OSError, SporchError):
        pass


def delete(record_id: str) -> None:
    try:
        (jobs_dir() / f"{record_id}.json").unlink()
    except FileNotFoundError:
        pass


def read_file(path: Path) -> JobRecord:
    """The record in ``path``; ValueError (with the reason) when it is unreadable."""
    try:
        return JobRecord.from_dict(json.loads(path.read_text(encoding="utf-8")))
    except OSError as e:
        raise ValueError(e.strerror or str(e)) from None
    except (ValueError, TypeError) as e:  # bad JSON, bad UTF-8, missing keys, wrong kinds
        raise ValueError(" ".join(str(e).split())[:200]) from None


def load_file(path: Path) -> Optional[JobRecord]:
    try:
        return read_file(path)
    except ValueError:
        return None


def load_all_checked() -> tuple[List[JobRecord], List[tuple[Path, str]]]:
    """(every readable record, oldest submission first; (path, reason) of every unreadable one)."""
    folder = jobs_dir()
    if not folder.is_dir():
        return [], []
    out, bad = [], []
    for p in sorted(folder.glob("*.json")):
        try:
            out.append(read_file(p))
        except ValueError as e:
            bad.append((p, str(e)))
    return sorted(out, key=lambda r: (r.submitted, r.id)), bad


def load_all() -> List[JobRecord]:
    """Every readable record, oldest submission first."""
    return load_all_checked()[0]


def find(ref: str, records: Optional[List[JobRecord]] = None) -> JobRecord:
    """A record by sporch id, Slurm job id, name (latest), or a job dir path.

    Raises a one-line SporchError when nothing (or, for an id prefix, more than one) matches.
    """
    ref = str(ref).strip()
    recs = load_all() if records is None else records
    for r in recs:
        if r.id == ref:
            return r
    if re.fullmatch(r"\d+", ref, re.ASCII):
        hits = [r for r in recs if r.backend_job_id == ref]
        if hits:
            return hits[-1]
    hits = [r for r in recs if r.name == ref]
    if hits:
        return hits[-1]
    p = Path(ref).expanduser()
    if (p / RECORD_FILE).is_file():
        rec = load_file(p / RECORD_FILE)
        if rec is not None:
            return rec
    hits = [r for r in recs if r.id.startswith(ref)]
    if len(hits) == 1:
        return hits[0]
    if len(hits) > 1:
        raise SporchError(f"job {ref!r} is ambiguous: {', '.join(r.id for r in hits[:5])}")
    where = jobs_dir()
    raise SporchError(f"no job {ref!r} known (by sporch id, Slurm job id or name) in {where}; "
                      "`sporch status` lists the known jobs")
