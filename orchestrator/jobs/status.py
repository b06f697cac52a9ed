"""Where are my jobs? One ``squeue`` call per poll for every job that may still be alive,
one ``sacct`` call for those squeue no longer knows, and the job directory when the cluster
keeps no accounting (TorchX falls back the same way).

For a job that did not complete, the failed rank and its one-line error come from
``<job_dir>/result.json`` (rank 0's summary), else ``<job_dir>/ranks/rank<N>.json``, else the
last error line of the rank logs.

Jobs submitted over ssh (``record.remote``) are asked about on their login host: the same
squeue/sacct calls through an ssh runner (one of each per host), the job dir read over SFTP.

Exit status of ``sporch wait`` (:meth:`JobStatus.exit_status`): 0 COMPLETED, 1 FAILED (and
NODE_FAIL, OUT_OF_MEMORY, BOOT_FAIL, anything else that is not a success), 3 CANCELLED,
TIMEOUT, PREEMPTED or DEADLINE.
"""

from __future__ import annotations

import json
import re
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Dict, Iterable, List, Optional, Sequence

from orchestrator.jobs import store
from orchestrator.jobs.store import JobRecord

#: Terminal states that mean "stopped from outside" (wait exits 3).
STOPPED_STATES = frozenset({"CANCELLED", "TIMEOUT", "PREEMPTED", "DEADLINE"})
EXIT_OK, EXIT_FAILED, EXIT_STOPPED = 0, 1, 3
_ERROR_LINE_RE = re.compile(r"^([A-Za-z_][\w.]*(?:Error|Exception|Interrupt|Exit|Failure)|error|fatal)\b.*",
                            re.IGNORECASE)


@dataclass
class SlurmRow:
    state: str
    reason: Optional[str] = None
    exit_code: Optional[str] = None
    elapsed: Optional[str] = None
    nodelist: Optional[str] = None


@dataclass
class JobStatus:
    id: str
    name: str
    cluster: str
    slurm_job_id: str
    state: str
    terminal: bool
    source: str  # squeue | sacct | job dir | record
    reason: Optional[str] = None
    exit_code: Optional[str] = None
    elapsed: Optional[str] = None
    nodelist: Optional[str] = None
    nodes: int = 0
    failed_rank: Optional[int] = None
    error: Optional[str] = None
    result_status: Optional[str] = None  # result.json "status"
    restart: Optional[int] = None
    step: Optional[int] = None  # last finished step in the progress checkpoint
    job_dir: str = ""

    @property
    def completed(self) -> bool:
        return self.terminal and self.state == "COMPLETED" and self.result_status != "failed"

    def exit_status(self) -> int:
        if self.completed:
            return EXIT_OK
        if self.state in STOPPED_STATES:
            return EXIT_STOPPED
        return EXIT_FAILED

    def to_dict(self) -> Dict[str, Any]:
        return asdict(self)

    def final_dict(self) -> Dict[str, Any]:
        keys = ("state", "reason", "exit_code", "elapsed", "nodelist", "failed_rank", "error", "result_status",
                "restart", "step")
        return {k: getattr(self, k) for k in keys}


# -- where the job dir is: here, or on a login host (``files``: orchestrator.remote.ssh.SftpFiles) ------
class LocalFiles:
    """The reads of a job dir on this machine (missing -> None / [])."""

    def read_text(self, path: str) -> Optional[str]:
        try:
            return Path(path).read_text(encoding="utf-8")
        except OSError:
            return None

    def listdir(self, path: str) -> List[str]:
        try:
            return [p.name for p in Path(path).iterdir()]
        except OSError:
            return []

    def read_tail(self, path: str, max_bytes: int) -> Optional[str]:
        try:
            with open(path, "rb") as fh:
                fh.seek(0, 2)
                size = fh.tell()
                fh.seek(max(0, size - max_bytes))
                return fh.read().decode("utf-8", errors="replace")
        except OSError:
            return None


LOCAL = LocalFiles()


# -- Slurm queries (one call each) --------------------------------------------------------------
def _row(st) -> SlurmRow:
    return SlurmRow(st.name, st.reason, str(st.exit_code) if st.exit_code else None, st.elapsed, st.nodelist)


def squeue_rows(ids: Sequence[str], runner=None) -> Dict[str, SlurmRow]:
    """State of every job slurmctld still knows, in one squeue call."""
    from orchestrator.slurm.query import squeue_states

    return {i: _row(st) for i, st in squeue_states(list(ids), runner=runner).items()} if ids else {}


def sacct_rows(ids: Sequence[str], runner=None) -> Optional[Dict[str, SlurmRow]]:
    """Final states from accounting, in one sacct call; None when the cluster has none."""
    from orchestrator.slurm.query import sacct_states

    if not ids:
        return {}
    states = sacct_states(list(ids), runner=runner)
    return None if states is None else {i: _row(st) for i, st in states.items()}


def is_terminal(state: str) -> bool:
    from orchestrator.slurm.states import TERMINAL_STATES

    return state in TERMINAL_STATES


# -- the job directory --------------------------------------------------------------------------
def _read_json(path: Path, files=None) -> Optional[Dict[str, Any]]:
    text = (files or LOCAL).read_text(str(path))
    if text is None:
        return None
    try:
        data = json.loads(text)
    except ValueError:
        return None
    return data if isinstance(data, dict) else None


def read_result(job_dir: str, files=None) -> Optional[Dict[str, Any]]:
    return _read_json(Path(job_dir) / "result.json", files)


def progress_step(job_dir: str, files=None) -> Optional[int]:
    data = _read_json(Path(job_dir) / "checkpoint" / "progress.json", files)
    if data and isinstance(data.get("step"), int):
        return data["step"]
    return None


def one_line(text: Any, limit: int = 300) -> str:
    s = " ".join(str(text).split())
    return s if len(s) <= limit else s[: limit - 3] + "..."


def _root_cause(errors: List[Dict[str, Any]]) -> Optional[Dict[str, Any]]:
    from runtime.results import root_cause  # stdlib-only module: the result files' contract

    return root_cause(errors)


def _rank_of(path: Path) -> Optional[int]:
    m = re.search(r"(\d+)", path.stem.replace("rank", ""))
    return int(m.group(1)) if m else None


def failure_from_rank_files(job_dir: str, files=None) -> Optional[Dict[str, Any]]:
    errors = []
    folder = Path(job_dir) / "ranks"
    names = [n for n in (files or LOCAL).listdir(str(folder)) if n.startswith("rank") and n.endswith(".json")]
    for p in sorted((folder / n for n in names), key=lambda q: _rank_of(q) or 0):
        rec = _read_json(p, files)
        if not rec or rec.get("status") == "completed":
            continue
        err = rec.get("error")
        if isinstance(err, dict):
            errors.append({"rank": err.get("rank", rec.get("rank")), "error": err.get("error", "")})
        elif err:
            errors.append({"rank": rec.get("rank", _rank_of(p)), "error": str(err)})
    return _root_cause(errors)


def last_error_line(path: Path, max_bytes: int = 65536, files=None) -> Optional[str]:
    """The last line of a log that looks like an error (``ValueError: ...``, ``error: ...``)."""
    text = (files or LOCAL).read_tail(str(path), max_bytes)
    if text is None:
        return None
    for line in reversed(text.splitlines()):
        line = line.strip()
        if _ERROR_LINE_RE.match(line) and not line.startswith("Traceback"):
            return line
    return None


def failure_from_logs(record: JobRecord, max_ranks: int = 4096, files=None) -> Optional[Dict[str, Any]]:
    pattern = record.logs.get("rank_err")
    errors: List[Dict[str, Any]] = []
    if pattern:
        for rank in range(min(record.world_size or 0, max_ranks)):
            line = last_error_line(record.log_path("rank_err", rank), files=files)
            if line:
                errors.append({"rank": rank, "error": line})
    cause = _root_cause(errors)
    if cause is None and record.logs.get("batch_err"):
        line = last_error_line(record.log_path("batch_err"), files=files)
        if line:
            cause = {"rank": None, "error": line}
    return cause


def failure_info(record: JobRecord, result: Optional[Dict[str, Any]], files=None) -> Optional[Dict[str, Any]]:
    """{rank, error} of the failure: result.json, else rank files, else the logs."""
    if result and result.get("status") == "failed" and (result.get("error") or result.get("failed_rank") is not None):
        return {"rank": result.get("failed_rank"), "error": result.get("error") or ""}
    if result and result.get("status") == "completed":
        return None
    return failure_from_rank_files(record.job_dir, files) or failure_from_logs(record, files=files)


# -- putting it together ------------------------------------------------------------------------
def _from_final(record: JobRecord) -> JobStatus:
    f = dict(record.final or {})
    return JobStatus(id=record.id, name=record.name, cluster=record.cluster, slurm_job_id=record.slurm_job_id,
                     state=f.get("state", "UNKNOWN"), terminal=True, source="record", reason=f.get("reason"),
                     exit_code=f.get("exit_code"), elapsed=f.get("elapsed"), nodelist=f.get("nodelist"),
                     nodes=record.nodes, failed_rank=f.get("failed_rank"), error=f.get("error"),
                     result_status=f.get("result_status"), restart=f.get("restart"), step=f.get("step"),
                     job_dir=record.job_dir)


def _from_job_dir(record: JobRecord, result: Optional[Dict[str, Any]], files=None) -> SlurmRow:
    """No squeue row and no accounting: what the job left behind."""
    status = (result or {}).get("status")
    if status == "completed":
        return SlurmRow("COMPLETED")
    if record.cancelled:
        return SlurmRow("CANCELLED", reason=f"cancelled by sporch at {record.cancelled}")
    if status == "failed":
        return SlurmRow("FAILED")
    if status == "requeued":
        return SlurmRow("FAILED", reason="stopped for a requeue but no longer in the queue")
    if failure_from_rank_files(record.job_dir, files):
        return SlurmRow("FAILED")
    return SlurmRow("FAILED", reason="left the queue without a result (no accounting on this cluster)")


def poll(records: Iterable[JobRecord], *, refresh: bool = False, save: bool = True) -> List[JobStatus]:
    """The status of every record: at most one squeue and one sacct call in all.

    Jobs whose terminal status is cached in the record are not asked about again unless
    ``refresh``. Newly terminal statuses are cached (``save``).
    """
    records = list(records)
    live = [r for r in records if refresh or not r.final]
    # one squeue (+ one sacct) call per place: here, and each login host of remote jobs
    groups: Dict[Any, List[JobRecord]] = {}
    for r in live:
        groups.setdefault(_remote_key(r), []).append(r)
    rows: Dict[Any, SlurmRow] = {}
    sources: Dict[Any, str] = {}
    accounting_of: Dict[Any, bool] = {}
    files_of: Dict[Any, Any] = {None: LOCAL}
    for key, recs in groups.items():
        runner = None
        if key is not None:
            from orchestrator.remote.ssh import SftpFiles, runner_for

            runner = runner_for(recs[0].remote)
            files_of[key] = SftpFiles(runner.host)
        g_rows, g_sources, accounting_of[key] = _query([r.slurm_job_id for r in recs], runner)
        for i, row in g_rows.items():
            rows[(key, i)] = row
            sources[(key, i)] = g_sources[i]

    out: List[JobStatus] = []
    for rec in records:
        if rec.final and not refresh:
            out.append(_from_final(rec))
            continue
        key = _remote_key(rec)
        files = files_of.get(key, LOCAL)
        accounting = accounting_of.get(key, True)
        result = read_result(rec.job_dir, files)
        row = rows.get((key, rec.slurm_job_id))
        source = sources.get((key, rec.slurm_job_id), "job dir")
        if row is None:
            row = _from_job_dir(rec, result, files)
            if accounting and not row.reason:
                row.reason = "not in squeue or sacct"
        terminal = is_terminal(row.state) or source == "job dir"
        st = JobStatus(id=rec.id, name=rec.name, cluster=rec.cluster, slurm_job_id=rec.slurm_job_id,
                       state=row.state, terminal=terminal, source=source, reason=row.reason,
                       exit_code=row.exit_code, elapsed=row.elapsed, nodelist=row.nodelist, nodes=rec.nodes,
                       result_status=(result or {}).get("status"), restart=(result or {}).get("restart"),
                       step=progress_step(rec.job_dir, files), job_dir=rec.job_dir)
        if terminal and not st.completed and st.state != "CANCELLED":
            info = failure_info(rec, result, files)
            if info:
                st.failed_rank = info.get("rank")
                st.error = one_line(info.get("error", "")) or None
        out.append(st)
        if terminal and save:
            rec.final = st.final_dict()
            try:
                store.save(rec, job_dir_copy=False)
            except OSError:
                pass
    return out


def _remote_key(record: JobRecord) -> Any:
    """None for jobs submitted here; (host, port, user) for jobs submitted over ssh."""
    r = record.remote
    if not r:
        return None
    return (r.get("host"), int(r.get("port") or 22), r.get("user"))


def _query(ids: List[str], runner=None):
    """(rows by Slurm id, source by Slurm id, accounting?) from one squeue and one sacct call."""
    if not ids:
        return {}, {}, True
    # the local calls keep their old signature (tests replace these functions)
    rows: Dict[str, SlurmRow] = dict(squeue_rows(ids) if runner is None else squeue_rows(ids, runner=runner))
    sources = {i: "squeue" for i in rows}
    missing = [i for i in ids if i not in rows]
    accounting = True
    if missing:
        acct = sacct_rows(missing) if runner is None else sacct_rows(missing, runner=runner)
        if acct is None:
            accounting = False
        else:
            for i in missing:
                if i in acct:
                    rows[i] = acct[i]
                    sources[i] = "sacct"
    return rows, sources, accounting


def poll_one(record: JobRecord, *, refresh: bool = False) -> JobStatus:
    return poll([record], refresh=refresh)[0]
