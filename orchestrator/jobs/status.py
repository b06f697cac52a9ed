"""Where are my jobs? One ``squeue`` call per poll for every job that may still be alive,
one ``sacct`` call for those squeue no longer knows, and the job directory when the cluster
keeps no accounting (TorchX falls back the same way).

For a job that did not complete, the failed rank and its one-line error come from
``<job_dir>/result.json`` (rank 0's summary), else ``<job_dir>/ranks/rank<N>.json``, else the
last error line of the rank logs.

Every record is asked about on its :class:`~sporch.orchestrator.host.Host` (``hosts(record)``, default
:func:`sporch.orchestrator.host.host_for` of ``record.remote``): this machine, or the login host of a job
submitted over ssh (one squeue and one sacct call per host, the job dir read over SFTP).

Exit status of ``sporch wait`` (:meth:`JobStatus.exit_status`): 0 COMPLETED, 1 FAILED (and
NODE_FAIL, OUT_OF_MEMORY, BOOT_FAIL, anything else that is not a success), 3 CANCELLED,
TIMEOUT, PREEMPTED or DEADLINE.
"""

from __future__ import annotations

import dataclasses
import json
import re
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Callable, Dict, Iterable, List, Optional, Sequence, Union

from sporch.orchestrator.host import LOCAL, Host, host_for, read_tail
from sporch.orchestrator.jobs import store
from sporch.orchestrator.jobs.batchlog import root_death, slurm_error, task_deaths
from sporch.orchestrator.jobs.store import JobRecord
from sporch.orchestrator.submit.local_run import recorded_errors
from sporch.orchestrator.contract.files import JobFiles
from sporch.orchestrator.contract.exit_codes import EXIT_FAILED, EXIT_OK, EXIT_STOPPED
from sporch.orchestrator.slurm.query import sacct_states, squeue_states
from sporch.orchestrator.slurm.states import TERMINAL_STATES
from sporch.orchestrator.submit.backend import BACKENDS, REMOTE_BACKEND, get_backend

#: Terminal states that mean "stopped from outside" (wait exits 3).
STOPPED_STATES = frozenset({"CANCELLED", "TIMEOUT", "PREEMPTED", "DEADLINE"})
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
    total_steps: Optional[int] = None  # the workload's steps (with ``step``: progress "step i/N")
    outcome: Optional[str] = None  # what the job measured: verify error or step time (result.json)

    @property
    def completed(self) -> bool:
        return self.terminal and self.state == "COMPLETED" and self.result_status != "failed"

    def exit_status(self) -> int:
        if self.completed:
            return EXIT_OK
        if self.state in STOPPED_STATES:
            return EXIT_STOPPED
        return EXIT_FAILED

    @property
    def progress(self) -> Optional[str]:
        """``step i/N`` (``step i`` when N is unknown), None before the first step."""
        if self.step is None:
            return None
        return f"step {self.step}/{self.total_steps}" if self.total_steps else f"step {self.step}"

    def to_dict(self) -> Dict[str, Any]:
        return {**asdict(self), "progress": self.progress}

    def final_dict(self) -> Dict[str, Any]:
        keys = ("state", "reason", "exit_code", "elapsed", "nodelist", "failed_rank", "error", "result_status",
                "restart", "step", "total_steps", "outcome")
        return {k: getattr(self, k) for k in keys}


# -- Slurm queries (one call each) --------------------------------------------------------------
def _row(st) -> SlurmRow:
    return SlurmRow(st.name, st.reason, str(st.exit_code) if st.exit_code else None, st.elapsed, st.nodelist)


def squeue_rows(ids: Sequence[str], host: Host = LOCAL, array: bool = False) -> Dict[str, SlurmRow]:
    """State of every job slurmctld still knows, in one squeue call (``array``: one row per
    array task, ``"123_4"``)."""
    return {i: _row(st) for i, st in squeue_states(list(ids), host=host, array=array).items()} if ids else {}


def sacct_rows(ids: Sequence[str], host: Host = LOCAL) -> Optional[Dict[str, SlurmRow]]:
    """Final states from accounting, in one sacct call; None when the cluster has none."""
    if not ids:
        return {}
    states = sacct_states(list(ids), host=host)
    return None if states is None else {i: _row(st) for i, st in states.items()}


def is_terminal(state: str) -> bool:
    return state in TERMINAL_STATES


# -- the job directory --------------------------------------------------------------------------
def _read_json(path: Union[str, Path], host: Host = LOCAL) -> Optional[Dict[str, Any]]:
    text = host.read_text(str(path))
    if text is None:
        return None
    try:
        data = json.loads(text)
    except ValueError:
        return None
    return data if isinstance(data, dict) else None


def read_result(job_dir: str, host: Host = LOCAL) -> Optional[Dict[str, Any]]:
    return _read_json(JobFiles(job_dir).result, host)


def progress_step(job_dir: str, host: Host = LOCAL) -> Optional[int]:
    return progress_of(job_dir, host)[0]


def progress_of(job_dir: str, host: Host = LOCAL) -> tuple:
    """(last finished step, the workload's steps) from the progress checkpoint; None where unknown."""
    data = _read_json(JobFiles(job_dir).progress, host) or {}
    step, total = data.get("step"), data.get("total")
    return (step if isinstance(step, int) else None), (total if isinstance(total, int) else None)


def outcome_of(result: Optional[Dict[str, Any]]) -> Optional[str]:
    """What a finished job measured, in one line: the verify error against the tolerance, else
    the step time (slowest rank's median); None when result.json has neither."""
    if not result:
        return None
    if result.get("max_abs_err") is not None:
        verdict = "ok" if result.get("verified") else "FAILED"
        return (f"verify {verdict}: max_abs_err {result['max_abs_err']:.3g}, max_rel_err "
                f"{result.get('max_rel_err', float('nan')):.3g} (tolerance {result.get('tolerance')})")
    ms = result.get("step_ms_median_max") or (result.get("metrics") or {}).get("step_ms_median")
    if isinstance(ms, (int, float)):
        return f"step {ms:.4g} ms (median)"
    return None


def one_line(text: Any, limit: int = 300) -> str:
    s = " ".join(str(text).split())
    return s if len(s) <= limit else s[: limit - 3] + "..."


def root_cause(errors: List[Dict[str, Any]]) -> Optional[Dict[str, Any]]:
    # sporch.orchestrator.contract.results is stdlib-only (the result files' contract), but the orchestrator never
    # imports runtime/ at module level (the brief's import rule)
    from sporch.orchestrator.contract.results import root_cause as pick

    return pick(errors)


def _rank_of(path: Path) -> Optional[int]:
    m = re.search(r"(\d+)", path.stem.replace("rank", ""))
    return int(m.group(1)) if m else None


def failure_from_rank_files(job_dir: str, host: Host = LOCAL) -> Optional[Dict[str, Any]]:
    errors = []
    folder = Path(JobFiles(job_dir).ranks)
    names = [n for n in host.listdir(str(folder)) if n.startswith("rank") and n.endswith(".json")]
    for p in sorted((folder / n for n in names), key=lambda q: _rank_of(q) or 0):
        rec = _read_json(p, host)
        if not rec or rec.get("status") == "completed":
            continue
        err = rec.get("error")
        if isinstance(err, dict):
            errors.append({"rank": err.get("rank", rec.get("rank")), "error": err.get("error", "")})
        elif err:
            errors.append({"rank": rec.get("rank", _rank_of(p)), "error": str(err)})
    return root_cause(errors)


def last_error_line(path: Path, max_bytes: int = 65536, host: Host = LOCAL) -> Optional[str]:
    """The last line of a log that looks like an error (``ValueError: ...``, ``error: ...``)."""
    text = read_tail(host, str(path), max_bytes)
    if text is None:
        return None
    for line in reversed(text.splitlines()):
        line = line.strip()
        if _ERROR_LINE_RE.match(line) and not line.startswith("Traceback"):
            return line
    return None


def failure_from_logs(record: JobRecord, max_ranks: int = 4096, host: Host = LOCAL) -> Optional[Dict[str, Any]]:
    pattern = record.logs.get("rank_err")
    errors: List[Dict[str, Any]] = []
    if pattern:
        for rank in range(min(record.world_size or 0, max_ranks)):
            line = last_error_line(record.log_path("rank_err", rank), host=host)
            if line:
                errors.append({"rank": rank, "error": line})
    cause = root_cause(errors)
    if cause is None and record.logs.get("batch_err"):
        line = last_error_line(record.log_path("batch_err"), host=host)
        if line:
            cause = {"rank": None, "error": line}
    return cause


def batch_log_text(record: JobRecord, host: Host = LOCAL, max_bytes: int = 65536) -> str:
    """The end of the batch script's stderr (srun's and Slurm's own reports), "" when unreadable."""
    if not record.logs.get("batch_err"):
        return ""
    return read_tail(host, str(record.log_path("batch_err")), max_bytes) or ""


def failure_info(record: JobRecord, result: Optional[Dict[str, Any]], host: Host = LOCAL
                 ) -> Optional[Dict[str, Any]]:
    """{rank, error} of the failure: a rank srun reports as ended without writing its record
    (killed by a signal: its peers' connection errors follow from it), else result.json, else
    rank files, else the logs."""
    if record.backend != "local":  # a local run's supervisor puts its own exit report in result.json
        death = root_death(task_deaths(batch_log_text(record, host)), recorded_errors(record.job_dir, host))
        if death is not None:
            return death
    if result and result.get("status") == "failed" and (result.get("error") or result.get("failed_rank") is not None):
        return {"rank": result.get("failed_rank"), "error": result.get("error") or ""}
    if result and result.get("status") == "completed":
        return None
    return failure_from_rank_files(record.job_dir, host) or failure_from_logs(record, host=host)


# -- putting it together ------------------------------------------------------------------------
def _from_final(record: JobRecord) -> JobStatus:
    f = dict(record.final or {})
    return JobStatus(id=record.id, name=record.name, cluster=record.cluster, slurm_job_id=record.slurm_job_id,
                     state=f.get("state", "UNKNOWN"), terminal=True, source="record", reason=f.get("reason"),
                     exit_code=f.get("exit_code"), elapsed=f.get("elapsed"), nodelist=f.get("nodelist"),
                     nodes=record.nodes, failed_rank=f.get("failed_rank"), error=f.get("error"),
                     result_status=f.get("result_status"), restart=f.get("restart"), step=f.get("step"),
                     job_dir=record.job_dir, total_steps=f.get("total_steps"), outcome=f.get("outcome"))


def _from_job_dir(record: JobRecord, result: Optional[Dict[str, Any]], host: Host = LOCAL) -> SlurmRow:
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
    if failure_from_rank_files(record.job_dir, host):
        return SlurmRow("FAILED")
    return SlurmRow("FAILED", reason="left the queue without a result (no accounting on this cluster)")


def _completed_without_result(record: JobRecord, result: Optional[Dict[str, Any]], row: SlurmRow,
                              host: Host) -> SlurmRow:
    """Slurm says COMPLETED (the batch script exited 0, e.g. srun failed to start the ranks and
    Slurm 22.05 still returned 0) but the ranks' result.json is missing or not completed: FAILED,
    with the reason the batch log gives."""
    if result is None:
        why = slurm_error(batch_log_text(record, host)) or last_error_line(
            record.log_path("batch_err"), host=host) if record.logs.get("batch_err") else None
        reason = "finished without a result (no result.json)" + (f": {one_line(why)}" if why else
                                                                  "; see the batch log")
    else:
        reason = f"the ranks reported {result.get('status', 'no status')} in result.json"
    return dataclasses.replace(row, state="FAILED", reason=reason)


def record_host(record: JobRecord) -> Host:
    """Where a record's job runs: this machine, or its login host (``record.remote``)."""
    return host_for(record.remote)


def record_backend(record: JobRecord, host: Host) -> Any:
    """The backend that submitted ``record``, on ``host`` (a Slurm one for unknown names)."""
    return get_backend(record.backend if record.backend in BACKENDS else REMOTE_BACKEND, host)


def poll(records: Iterable[JobRecord], *, refresh: bool = False, save: bool = True,
         hosts: Optional[Callable[[JobRecord], Host]] = None) -> List[JobStatus]:
    """The status of every record, each asked about through its backend: at most one squeue and
    one sacct call per host in all for Slurm jobs, the supervisor's state for local runs.

    Jobs whose terminal status is cached in the record are not asked about again unless
    ``refresh``. Newly terminal statuses are cached (``save``). ``hosts(record)`` says where a
    record's job runs (default :func:`record_host`).
    """
    hosts = hosts or record_host
    records = list(records)
    live = [r for r in records if refresh or not r.final]
    groups: Dict[Any, List[JobRecord]] = {}
    backend_of: Dict[Any, Any] = {}
    key_of: Dict[str, Any] = {}
    for r in live:
        host = hosts(r)
        backend = record_backend(r, host)
        key = (backend.queue, id(host))
        backend_of.setdefault(key, backend)
        groups.setdefault(key, []).append(r)
        key_of[r.id] = (key, host)
    rows: Dict[Any, SlurmRow] = {}
    sources: Dict[Any, str] = {}
    accounting_of: Dict[Any, bool] = {}
    for key, recs in groups.items():
        g_rows, g_sources, accounting_of[key] = backend_of[key].query(recs)
        for i, row in g_rows.items():
            rows[(key, i)] = row
            sources[(key, i)] = g_sources[i]

    out: List[JobStatus] = []
    for rec in records:
        if rec.final and not refresh:
            out.append(_from_final(rec))
            continue
        key, host = key_of[rec.id]
        accounting = accounting_of.get(key, True)
        result = read_result(rec.job_dir, host)
        row = rows.get((key, rec.slurm_job_id))
        source = sources.get((key, rec.slurm_job_id), "job dir")
        if row is None:
            row = _from_job_dir(rec, result, host)
            if accounting and not row.reason:
                row.reason = "not in squeue or sacct"
        terminal = is_terminal(row.state) or source == "job dir"
        if terminal and row.state == "COMPLETED" and (result or {}).get("status") != "completed":
            row = _completed_without_result(rec, result, row, host)
        st = JobStatus(id=rec.id, name=rec.name, cluster=rec.cluster, slurm_job_id=rec.slurm_job_id,
                       state=row.state, terminal=terminal, source=source, reason=row.reason,
                       exit_code=row.exit_code, elapsed=row.elapsed, nodelist=row.nodelist, nodes=rec.nodes,
                       result_status=(result or {}).get("status"), restart=(result or {}).get("restart"),
                       job_dir=rec.job_dir, outcome=outcome_of(result))
        st.step, st.total_steps = progress_of(rec.job_dir, host)
        if terminal and not st.completed and st.state != "CANCELLED":
            info = failure_info(rec, result, host)
            if info:
                st.failed_rank = info.get("rank")
                st.error = one_line(info.get("error", "")) or None
        out.append(st)
        if terminal and save:
            rec.final = st.final_dict()
            try:  # the job dir's record.json gets the final state too
                store.save(rec, host=host)
            except OSError:
                pass
    return out


def slurm_query(ids: List[str], host: Host):
    """(rows by Slurm id, source by Slurm id, accounting?) from one squeue and one sacct call."""
    if not ids:
        return {}, {}, True
    rows: Dict[str, SlurmRow] = dict(squeue_rows(ids, host))
    sources = {i: "squeue" for i in rows}
    missing = [i for i in ids if i not in rows]
    accounting = True
    if missing:
        acct = sacct_rows(missing, host)
        if acct is None:
            accounting = False
        else:
            for i in missing:
                if i in acct:
                    rows[i] = acct[i]
                    sources[i] = "sacct"
    return rows, sources, accounting


def poll_one(record: JobRecord, *, refresh: bool = False, hosts: Optional[Callable[[JobRecord], Host]] = None
             ) -> JobStatus:
    return poll([record], refresh=refresh, hosts=hosts)[0]
