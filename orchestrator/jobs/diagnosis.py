"""How a job failed: the rank and its one-line error, from what the job left behind.

In order of trust: a hung collective (the ranks that never arrived: rank 0's diagnosis in
``result.json``, else the collective watchdog's records in ``<job_dir>/hang/``), the ranks srun
reports as ended without writing their record (the batch log: a rank killed by a signal, whose
peers' broken connections follow from it), then ``<job_dir>/result.json`` (rank 0's summary),
then ``<job_dir>/ranks/rank<N>.json``, then the last error line of the rank logs and of the
batch log. A failure is a
:class:`~sporch.orchestrator.contract.results.RankError` (``rank`` and ``error``).

One module for ``sporch status`` (:mod:`sporch.orchestrator.jobs.status`), the local runner and
campaigns (:mod:`sporch.orchestrator.campaign.track`). Every file is read on the job's
:class:`~sporch.orchestrator.host.Host` (this machine, or a login host over SFTP).
"""

from __future__ import annotations

import posixpath
import re
from typing import Any, Dict, Iterable, List, Optional

from sporch.orchestrator.contract.job_files import JobFiles
from sporch.orchestrator.hangs import HangDiagnosis, diagnose, parse_record, record_names
from sporch.orchestrator.contract.results import (JobResult, RankError, RankRecord, ResultFileError,
                                                  root_cause)
from sporch.orchestrator.host import LOCAL, Host, read_tail
from sporch.orchestrator.jobs.batchlog import root_death, task_deaths
from sporch.orchestrator.jobs.store import JobRecord

_ERROR_LINE_RE = re.compile(r"^([A-Za-z_][\w.]*(?:Error|Exception|Interrupt|Exit|Failure)|error|fatal)\b.*",
                            re.IGNORECASE)


def one_line(text: Any, limit: int = 300) -> str:
    s = " ".join(str(text).split())
    return s if len(s) <= limit else s[: limit - 3] + "..."


def failure_line(cause: RankError) -> str:
    """``rank 3: ValueError: ...`` (the error alone when no rank is known)."""
    return (f"rank {cause.rank}: " if cause.rank is not None else "") + cause.error


# -- the result files ---------------------------------------------------------------------------
def load_result(job_dir: str, host: Host = LOCAL) -> Optional[JobResult]:
    """The job's ``result.json``; None when there is none; ResultFileError (one line naming
    the file) when it is broken."""
    path = JobFiles(job_dir).result
    text = host.read_text(path)
    return None if text is None else JobResult.from_json(text, path)


def rank_records(job_dir: str, host: Host = LOCAL) -> Dict[int, RankRecord]:
    """Every rank record that can be read, by rank (a broken one is left out: the others and
    the logs still tell)."""
    folder = JobFiles(job_dir).ranks
    out: Dict[int, RankRecord] = {}
    for name in host.listdir(folder):
        if not (name.startswith("rank") and name.endswith(".json")):
            continue
        path = posixpath.join(folder, name)
        text = host.read_text(path)
        try:
            rec = RankRecord.from_json(text, path) if text is not None else None
        except ResultFileError:
            continue
        if rec is not None:
            out[rec.rank] = rec
    return dict(sorted(out.items()))


def recorded_errors(job_dir: str, host: Host = LOCAL) -> Dict[int, Optional[str]]:
    """Rank -> the error its rank file records (None when it records none), for every rank that
    wrote one."""
    return {rank: rec.error.error if rec.error else None for rank, rec in rank_records(job_dir, host).items()}


def failure_from_result(result: Optional[JobResult]) -> Optional[RankError]:
    """The root cause ``result.json`` names when it says the job failed."""
    if result is None or result.status != "failed" or (not result.error and result.failed_rank is None):
        return None
    return RankError(result.failed_rank, result.error or "")


def hang_diagnosis(job_dir: str, host: Host = LOCAL, hosts: Optional[Dict[int, Optional[str]]] = None
                   ) -> Optional[HangDiagnosis]:
    """What the collective watchdog's records (``<job_dir>/hang/rank<N>.json``) say: the ranks
    that never arrived at the collective the others waited in; None when no rank timed out."""
    folder = JobFiles(job_dir).hang
    records: Dict[int, Dict[str, Any]] = {}
    for name in record_names(host.listdir(folder)):
        text = host.read_text(posixpath.join(folder, name))
        rec = parse_record(text) if text is not None else None
        if rec is not None:
            records[rec["rank"]] = rec
    return diagnose(records, hosts) if records else None


def failure_from_hang(job_dir: str, host: Host = LOCAL) -> Optional[RankError]:
    diagnosis = hang_diagnosis(job_dir, host)
    return RankError(diagnosis.failed_rank, diagnosis.line) if diagnosis is not None else None


def failure_from_rank_files(job_dir: str, host: Host = LOCAL) -> Optional[RankError]:
    errors = [rec.error for rec in rank_records(job_dir, host).values() if rec.status != "completed" and rec.error]
    return root_cause(errors)


# -- the logs -----------------------------------------------------------------------------------
def last_error_line(path: Any, max_bytes: int = 65536, host: Host = LOCAL) -> Optional[str]:
    """The last line of a log that looks like an error (``ValueError: ...``, ``error: ...``)."""
    text = read_tail(host, str(path), max_bytes)
    if text is None:
        return None
    for line in reversed(text.splitlines()):
        line = line.strip()
        if _ERROR_LINE_RE.match(line) and not line.startswith("Traceback"):
            return line
    return None


def first_error_line(paths: Iterable[Any], host: Host = LOCAL) -> Optional[str]:
    """The last error line of the first log in ``paths`` that has one."""
    return next((line for line in (last_error_line(p, host=host) for p in paths) if line), None)


def batch_log_text(record: JobRecord, host: Host = LOCAL, max_bytes: int = 65536) -> str:
    """The end of the batch script's stderr (srun's and Slurm's own reports), "" when unreadable."""
    if not record.logs.get("batch_err"):
        return ""
    return read_tail(host, str(record.log_path("batch_err")), max_bytes) or ""


def failure_from_logs(record: JobRecord, max_ranks: int = 4096, host: Host = LOCAL) -> Optional[RankError]:
    errors: List[RankError] = []
    if record.logs.get("rank_err"):
        for rank in range(min(record.world_size or 0, max_ranks)):
            line = last_error_line(record.log_path("rank_err", rank), host=host)
            if line:
                errors.append(RankError(rank, line))
    cause = root_cause(errors)
    if cause is None and record.logs.get("batch_err"):
        line = last_error_line(record.log_path("batch_err"), host=host)
        if line:
            cause = RankError(None, line)
    return cause


# -- putting it together ------------------------------------------------------------------------
def failure_info(record: JobRecord, result: Optional[JobResult], host: Host = LOCAL) -> Optional[RankError]:
    """The failure of a job that did not complete: a hung collective (rank 0's diagnosis, else
    the watchdog's records), a rank srun reports as ended without writing its record, else
    result.json, else the rank files, else the logs."""
    if result is not None and result.hang:
        return failure_from_result(result)
    hang = failure_from_hang(record.job_dir, host)  # the ranks the watchdog ended die after it
    if hang is not None:
        return hang
    if record.backend != "local":  # a local run's supervisor puts its own exit report in result.json
        death = root_death(task_deaths(batch_log_text(record, host)), recorded_errors(record.job_dir, host))
        if death is not None:
            return death
    cause = failure_from_result(result)
    if cause is not None:
        return cause
    if result is not None and result.completed:
        return None
    return failure_from_rank_files(record.job_dir, host) or failure_from_logs(record, host=host)


def job_dir_failure(job_dir: str, logs: Iterable[Any] = (), host: Host = LOCAL) -> Optional[str]:
    """``rank N: error`` of a job dir without a record (a campaign point): result.json, else the
    watchdog's records of a hung collective, else the rank files, else the last error line of
    the first of ``logs`` (read only when needed) that has one; None when nothing tells."""
    try:
        result, unreadable = load_result(job_dir, host), None
    except ResultFileError as exc:
        result, unreadable = None, str(exc)
    cause = failure_from_result(result)
    if cause is None or not cause.error:
        cause = failure_from_hang(job_dir, host) or failure_from_rank_files(job_dir, host)
    line = failure_line(cause) if cause is not None else first_error_line(logs, host) or unreadable
    return one_line(line) if line else None
