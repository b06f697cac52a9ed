"""Where are my jobs? One ``squeue`` call per poll for every job that may still be alive,
one ``sacct`` call for those squeue no longer knows, and the job directory when the cluster
keeps no accounting (TorchX falls back the same way); a local run's state comes from its
supervisor (:mod:`.local_state`).

For a job that did not complete, the failed rank and its one-line error come from
:mod:`.diagnosis` (the batch log, result.json, the rank files, the logs).

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
from dataclasses import asdict, dataclass
from typing import Any, Callable, Dict, Iterable, List, Optional, Tuple

from sporch.orchestrator.contract.exit_codes import EXIT_FAILED, EXIT_OK, EXIT_STOPPED
from sporch.orchestrator.contract.job_files import JobFiles
from sporch.orchestrator.contract.results import JobResult, ResultFileError
from sporch.orchestrator.host import LOCAL, Host, host_for
from sporch.orchestrator.jobs import store
from sporch.orchestrator.jobs.batchlog import slurm_error
from sporch.orchestrator.jobs.diagnosis import (batch_log_text, failure_from_rank_files, failure_info,
                                                last_error_line, load_result, one_line)
from sporch.orchestrator.jobs.local_state import local_rows
from sporch.orchestrator.jobs.store import JobRecord
from sporch.orchestrator.slurm.rows import SlurmRow, is_terminal, slurm_query

#: Terminal states that mean "stopped from outside" (wait exits 3).
STOPPED_STATES = frozenset({"CANCELLED", "TIMEOUT", "PREEMPTED", "DEADLINE"})


@dataclass
class JobStatus:
    id: str
    name: str
    cluster: str
    backend_job_id: str
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


# -- the job directory --------------------------------------------------------------------------
def progress_of(job_dir: str, host: Host = LOCAL) -> Tuple[Optional[int], Optional[int]]:
    """(last finished step, the workload's steps) from the progress checkpoint; None where unknown."""
    try:
        data = json.loads(host.read_text(JobFiles(job_dir).progress) or "{}")
    except ValueError:
        data = {}
    step, total = (data.get("step"), data.get("total")) if isinstance(data, dict) else (None, None)
    return (step if isinstance(step, int) else None), (total if isinstance(total, int) else None)


def outcome_of(result: Optional[JobResult]) -> Optional[str]:
    """What a finished job measured, in one line: the verify error against the tolerance, else
    the step time (slowest rank's median); None when result.json has neither."""
    if result is None:
        return None
    if result.max_abs_err is not None:
        verdict = "ok" if result.verified else "FAILED"
        rel = result.max_rel_err if result.max_rel_err is not None else float("nan")
        return (f"verify {verdict}: max_abs_err {result.max_abs_err:.3g}, max_rel_err {rel:.3g} "
                f"(tolerance {result.tolerance})")
    ms = result.step_ms_median_max or (result.metrics or {}).get("step_ms_median")
    if isinstance(ms, (int, float)):
        return f"step {ms:.4g} ms (median)"
    return None


def _result_of(job_dir: str, host: Host) -> Tuple[Optional[JobResult], Optional[str]]:
    """(result.json, None), or (None, the one-line reason it cannot be read)."""
    try:
        return load_result(job_dir, host), None
    except ResultFileError as exc:
        return None, str(exc)


# -- putting it together ------------------------------------------------------------------------
def _from_final(record: JobRecord) -> JobStatus:
    f = dict(record.final or {})
    return JobStatus(id=record.id, name=record.name, cluster=record.cluster, backend_job_id=record.backend_job_id,
                     state=f.get("state", "UNKNOWN"), terminal=True, source="record", reason=f.get("reason"),
                     exit_code=f.get("exit_code"), elapsed=f.get("elapsed"), nodelist=f.get("nodelist"),
                     nodes=record.nodes, failed_rank=f.get("failed_rank"), error=f.get("error"),
                     result_status=f.get("result_status"), restart=f.get("restart"), step=f.get("step"),
                     job_dir=record.job_dir, total_steps=f.get("total_steps"), outcome=f.get("outcome"))


def _from_job_dir(record: JobRecord, result: Optional[JobResult], host: Host = LOCAL) -> SlurmRow:
    """No squeue row and no accounting: what the job left behind."""
    status = result.status if result is not None else None
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


def _completed_without_result(record: JobRecord, result: Optional[JobResult], unreadable: Optional[str],
                              row: SlurmRow, host: Host) -> SlurmRow:
    """Slurm says COMPLETED (the batch script exited 0, e.g. srun failed to start the ranks and
    Slurm 22.05 still returned 0) but the ranks' result.json is missing, broken or not
    completed: FAILED, with the reason the batch log gives."""
    if unreadable:
        reason = f"finished without a readable result ({unreadable})"
    elif result is None:
        why = slurm_error(batch_log_text(record, host)) or last_error_line(
            record.log_path("batch_err"), host=host) if record.logs.get("batch_err") else None
        reason = "finished without a result (no result.json)" + (f": {one_line(why)}" if why else
                                                                  "; see the batch log")
    else:
        reason = f"the ranks reported {result.status} in result.json"
    return dataclasses.replace(row, state="FAILED", reason=reason)


def record_host(record: JobRecord) -> Host:
    """Where a record's job runs: this machine, or its login host (``record.remote``)."""
    return host_for(record.remote)


def queue_of(record: JobRecord) -> str:
    """Who knows the state of a record's job: its local supervisor, or Slurm (every other backend)."""
    return "local" if record.backend == "local" else "slurm"


def _ask(queue: str, records: List[JobRecord], host: Host) -> Tuple[Dict[str, SlurmRow], Dict[str, str], bool]:
    """(rows by job id, where each came from, accounting?) of records in one queue on one host."""
    if queue == "local":
        return local_rows(records, host)
    return slurm_query([r.backend_job_id for r in records], host)


def poll(records: Iterable[JobRecord], *, refresh: bool = False, save: bool = True,
         hosts: Optional[Callable[[JobRecord], Host]] = None) -> List[JobStatus]:
    """The status of every record: at most one squeue and one sacct call per host in all for
    Slurm jobs, the supervisor's state for local runs.

    Jobs whose terminal status is cached in the record are not asked about again unless
    ``refresh``. Newly terminal statuses are cached (``save``). ``hosts(record)`` says where a
    record's job runs (default :func:`record_host`).
    """
    hosts = hosts or record_host
    records = list(records)
    groups: Dict[Any, List[JobRecord]] = {}
    key_of: Dict[str, Any] = {}
    host_of: Dict[Any, Host] = {}
    for r in records:
        if refresh or not r.final:
            host = hosts(r)
            key = (queue_of(r), id(host))
            host_of[key] = host
            groups.setdefault(key, []).append(r)
            key_of[r.id] = key
    rows: Dict[Any, SlurmRow] = {}
    sources: Dict[Any, str] = {}
    accounting_of: Dict[Any, bool] = {}
    for key, recs in groups.items():
        g_rows, g_sources, accounting_of[key] = _ask(key[0], recs, host_of[key])
        for i, row in g_rows.items():
            rows[(key, i)] = row
            sources[(key, i)] = g_sources[i]

    out: List[JobStatus] = []
    for rec in records:
        if rec.final and not refresh:
            out.append(_from_final(rec))
            continue
        key = key_of[rec.id]
        host = host_of[key]
        result, unreadable = _result_of(rec.job_dir, host)
        row = rows.get((key, rec.backend_job_id))
        source = sources.get((key, rec.backend_job_id), "job dir")
        if row is None:
            row = _from_job_dir(rec, result, host)
            if accounting_of.get(key, True) and not row.reason:
                row.reason = "not in squeue or sacct"
        terminal = is_terminal(row.state) or source == "job dir"
        if terminal and row.state == "COMPLETED" and not (result is not None and result.completed):
            row = _completed_without_result(rec, result, unreadable, row, host)
        st = JobStatus(id=rec.id, name=rec.name, cluster=rec.cluster, backend_job_id=rec.backend_job_id,
                       state=row.state, terminal=terminal, source=source, reason=row.reason or unreadable,
                       exit_code=row.exit_code, elapsed=row.elapsed, nodelist=row.nodelist, nodes=rec.nodes,
                       result_status=result.status if result else None, restart=result.restart if result else None,
                       job_dir=rec.job_dir, outcome=outcome_of(result))
        st.step, st.total_steps = progress_of(rec.job_dir, host)
        if terminal and not st.completed and st.state != "CANCELLED":
            info = failure_info(rec, result, host)
            if info:
                st.failed_rank = info.rank
                st.error = one_line(info.error) or None
        out.append(st)
        if terminal and save:
            rec.final = st.final_dict()
            try:  # the job dir's record.json gets the final state too
                store.save(rec, host=host)
            except OSError:
                pass
    return out


def poll_one(record: JobRecord, *, refresh: bool = False, hosts: Optional[Callable[[JobRecord], Host]] = None
             ) -> JobStatus:
    return poll([record], refresh=refresh, hosts=hosts)[0]
