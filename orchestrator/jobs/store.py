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

from orchestrator.errors import SporchError
from orchestrator.host import Host, host_for
from orchestrator.plan.files import RECORD_FILE, JobFiles

SCHEMA = 1


def sporch_home() -> Path:
    """``$SPORCH_HOME`` or ``~/.local/share/sporch``."""
    env = os.environ.get("SPORCH_HOME", "").strip()
    return Path(env).expanduser() if env else Path("~/.local/share/sporch").expanduser()


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
    backend: str  # "submitit" | "sbatch"
    slurm_job_id: str
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
        known = {f.name for f in fields(cls)}
        return cls(**{k: v for k, v in d.items() if k in known})

    def log_path(self, kind: str, rank: Optional[int] = None) -> Path:
        """Absolute path of a log: kind in batch_out, batch_err, rank_out, rank_err."""
        pattern = self.logs.get(kind)
        if not pattern:
            raise SporchError(f"job {self.id}: no {kind} log known for backend {self.backend}")
        rel = pattern.format(job_id=self.slurm_job_id, rank=0 if rank is None else rank)
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


def save(record: JobRecord, *, job_dir_copy: bool = True, host: Optional[Host] = None) -> Path:
    """Write the record (atomically) under ``$SPORCH_HOME/jobs`` and, by default, into its job dir
    on ``host`` (default: the record's: this machine, or its login host)."""
    path = jobs_dir() / f"{record.id}.json"
    _write_json_atomic(path, record.to_dict())
    if not job_dir_copy:
        return path
    host = host or host_for(record.remote)
    try:  # best effort: the home copy is the authority
        if host.exists(record.job_dir):
            host.write_text(JobFiles(record.job_dir).record, json.dumps(record.to_dict(), indent=2) + "\n")
    except (OSError, SporchError):
        pass
    return path


def delete(record_id: str) -> None:
    try:
        (jobs_dir() / f"{record_id}.json").unlink()
    except FileNotFoundError:
        pass


def load_file(path: Path) -> Optional[JobRecord]:
    try:
        return JobRecord.from_dict(json.loads(path.read_text(encoding="utf-8")))
    except (OSError, ValueError, TypeError):
        return None


def load_all() -> List[JobRecord]:
    """Every readable record, oldest submission first."""
    folder = jobs_dir()
    if not folder.is_dir():
        return []
    out = [r for r in (load_file(p) for p in folder.glob("*.json")) if r is not None]
    return sorted(out, key=lambda r: (r.submitted, r.id))


def find(ref: str, records: Optional[List[JobRecord]] = None) -> JobRecord:
    """A record by sporch id, Slurm job id, name (latest), or a job dir path.

    Raises a one-line SporchError when nothing (or, for an id prefix, more than one) matches.
    """
    ref = str(ref).strip()
    recs = load_all() if records is None else records
    for r in recs:
        if r.id == ref:
            return r
    if re.fullmatch(r"\d+", ref):
        hits = [r for r in recs if r.slurm_job_id == ref]
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
