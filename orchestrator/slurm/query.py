"""Ask Slurm about jobs: many jobs in one call, and dry-run submissions (``--test-only``)."""

from __future__ import annotations

import dataclasses
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Dict, Optional, Sequence, Union

from sporch.orchestrator.contract.numbers import is_digits
from sporch.orchestrator.errors import SporchError
from sporch.orchestrator.host import LOCAL, Host
from sporch.orchestrator.slurm.commands import (DEFAULT_TIMEOUT, JobIds, asked, command_failure, job_id_list, run_slurm,
                                         slurm_reason)
from sporch.orchestrator.slurm.states import JobState, parse_state

_SEP = "|"
_ACCOUNTING_OFF = ("accounting storage is disabled", "accounting_storage/none")


def squeue_states(job_ids: JobIds, *, timeout: float = DEFAULT_TIMEOUT, host: Optional[Host] = None,
                  array: bool = False) -> Dict[str, JobState]:
    """State of each job slurmctld still knows, in ONE squeue call: ``{"123": JobState(...)}``.

    ``array``: one row per array task (``squeue --array``: ``"123_4"``, pending tasks too,
    where plain squeue folds them into ``"123_[4-9%2]"``).

    Jobs slurmctld has forgotten (ended more than MinJobAge ago) or never knew are missing from
    the result; ask :func:`sacct_states` for those.
    """
    ids = job_id_list(job_ids)
    if not ids:
        return {}
    tasks = ["--array"] if array else []
    proc = run_slurm(["squeue", "--noheader", "--states=all", *tasks, f"--jobs={','.join(ids)}",
                      f"--format=%i{_SEP}%T{_SEP}%r{_SEP}%M{_SEP}%N"], timeout=timeout, check=False, host=host)
    if proc.returncode != 0:
        reason = slurm_reason(proc.stderr, proc.stdout)
        # every id unknown: squeue exits 1 with "slurm_load_jobs error: Invalid job id specified"
        if "invalid job id" in reason.lower():
            return {}
        raise command_failure("squeue", reason or f"exit code {proc.returncode}", asked(host or LOCAL, "squeue"), proc)
    return _parse_rows(proc.stdout, ("id", "state", "reason", "elapsed", "nodelist"))


def squeue_comments(prefix: str, *, timeout: float = DEFAULT_TIMEOUT, host: Optional[Host] = None) -> Dict[str, str]:
    """``{comment: job id}`` of this user's jobs whose ``--comment`` starts with ``prefix``, in
    ONE squeue call (``squeue --me``; an array counts once, by its array job id ``%F``).

    How a submission whose job id was never recorded is found again: every job slurmctld still
    knows is listed, so a job that is pending or running is never missed; one that ended longer
    than MinJobAge ago is (it no longer runs either)."""
    proc = run_slurm(["squeue", "--noheader", "--me", "--states=all", f"--format=%F{_SEP}%k"], timeout=timeout,
                     check=False, host=host)
    if proc.returncode != 0:
        raise command_failure("squeue", slurm_reason(proc.stderr, proc.stdout) or f"exit code {proc.returncode}",
                              asked(host or LOCAL, "squeue"), proc)
    out: Dict[str, str] = {}
    for line in proc.stdout.splitlines():
        job, sep, comment = line.strip().partition(_SEP)
        if sep and comment.startswith(prefix) and is_digits(job):
            out.setdefault(comment, job)
    return out


def sacct_available(*, timeout: float = DEFAULT_TIMEOUT, host: Optional[Host] = None) -> bool:
    """Whether this cluster keeps accounting (sacct answers)."""
    proc = run_slurm(["sacct", "--noheader", "--parsable2", "--allocations", "--jobs=1", "--format=JobID"],
                     timeout=timeout, check=False, host=host)
    return proc.returncode == 0 or not _accounting_off(proc)


def sacct_states(job_ids: JobIds, *, timeout: float = DEFAULT_TIMEOUT, host: Optional[Host] = None
                 ) -> Optional[Dict[str, JobState]]:
    """State and exit code of each job from accounting, in ONE sacct call.

    Returns None when the cluster has no accounting (``AccountingStorageType=none``), an empty
    dict when no job is known. A requeued job shows its latest attempt. sacct lags job ends by
    a second or two. Raises SporchError when accounting is configured but broken (slurmdbd down).
    """
    ids = job_id_list(job_ids)
    proc = run_slurm(["sacct", "--noheader", "--parsable2", "--allocations",
                      f"--jobs={','.join(ids) if ids else '1'}",
                      "--format=JobID,State,ExitCode,Reason,Elapsed,NodeList"], timeout=timeout, check=False,
                     host=host)
    if proc.returncode != 0:
        if _accounting_off(proc):
            return None
        raise command_failure("sacct", slurm_reason(proc.stderr, proc.stdout) or f"exit code {proc.returncode}",
                              asked(host or LOCAL, "sacct"), proc)
    if not ids:
        return {}
    rows = _parse_rows(proc.stdout, ("id", "state", "exit", "reason", "elapsed", "nodelist"))
    return {k: v for k, v in rows.items() if k in ids or k.split("_")[0] in ids}


def _accounting_off(proc) -> bool:
    text = f"{proc.stderr}\n{proc.stdout}".lower()
    return any(s in text for s in _ACCOUNTING_OFF)


def _parse_rows(text: str, columns: Sequence[str]) -> Dict[str, JobState]:
    out: Dict[str, JobState] = {}
    for line in text.splitlines():
        if not line.strip():
            continue
        parts = line.split(_SEP)
        if len(parts) < 2:
            continue
        row = dict(zip(columns, parts))
        out[row["id"].strip()] = parse_state(row["state"], reason=row.get("reason"), exit_code=row.get("exit"),
                                             elapsed=row.get("elapsed"), nodelist=row.get("nodelist"))
    return out


# -- sbatch --test-only ------------------------------------------------------------------------
@dataclass(frozen=True)
class TestOnlyResult:
    """What ``sbatch --test-only`` said: accepted (with Slurm's estimate) or the reason why not."""

    __test__ = False  # not a pytest test class

    accepted: bool
    reason: str = ""  # Slurm's reason when rejected
    asked: str = "sbatch on this machine"  # which Slurm answered (commands.asked)
    start_time: Optional[str] = None  # "2026-11-22T07:10:04"
    processors: Optional[int] = None
    nodes: Optional[str] = None  # "node[1-2]"
    partition: Optional[str] = None
    output: str = field(default="", repr=False)

    def raise_if_rejected(self) -> "TestOnlyResult":
        if not self.accepted:
            raise self.error()
        return self

    def error(self) -> SporchError:
        """The one-line error of a refusal: "Slurm rejected the job (...)", or "could not reach
        Slurm (...)" when the controller did not answer."""
        return command_failure("sbatch", self.reason, self.asked)


_TEST_OK_RE = re.compile(
    r"Job (?P<id>\d+) to start at (?P<start>\S+) using (?P<procs>\d+) processors? on (?:nodes? )?"
    r"(?P<nodes>\S+)(?: in partition (?P<part>\S+))?")


def test_only(script: Union[str, Path, None] = None, args: Sequence[str] = (), *,
              timeout: float = DEFAULT_TIMEOUT, host: Optional[Host] = None,
              script_text: Optional[str] = None) -> TestOnlyResult:
    """Dry-run a submission: ``sbatch --test-only [args] [script]`` (``--wrap=true`` without a
    script and without ``--wrap`` in args). Never submits. A rejection is a result, not an error;
    a missing sbatch or a silent slurmctld raises SporchError.

    ``script_text``: the script's content, fed to sbatch on stdin (nothing is written; how a
    remote ``host`` checks a script that exists only here)."""
    host = host or LOCAL
    cmd = ["sbatch", "--test-only", *[str(a) for a in args]]
    if script_text is not None:
        proc = run_slurm(cmd, timeout=timeout, check=False, host=host, input=script_text)
        return dataclasses.replace(parse_test_only(proc.returncode, proc.stdout, proc.stderr),
                                   asked=asked(host, "sbatch"))
    if script is not None:
        if not host.remote and not Path(script).is_file():
            raise SporchError(f"batch script {script} not found")
        cmd.append(str(script))
    elif not any(str(a).startswith("--wrap") for a in args):
        cmd.append("--wrap=true")
    proc = run_slurm(cmd, timeout=timeout, check=False, host=host)
    return dataclasses.replace(parse_test_only(proc.returncode, proc.stdout, proc.stderr), asked=asked(host, "sbatch"))


def parse_test_only(returncode: int, stdout: str, stderr: str) -> TestOnlyResult:
    """Parse ``sbatch --test-only`` output (it reports on stderr)."""
    text = f"{stderr}\n{stdout}"
    m = _TEST_OK_RE.search(text)
    if returncode == 0 and m:
        return TestOnlyResult(True, start_time=m.group("start"), processors=int(m.group("procs")),
                              nodes=m.group("nodes"), partition=m.group("part"), output=text.strip())
    if returncode == 0:
        return TestOnlyResult(True, output=text.strip())
    reason = slurm_reason(stderr, stdout) or f"sbatch --test-only exited with {returncode}"
    return TestOnlyResult(False, reason=reason, output=text.strip())


test_only.__test__ = False  # type: ignore[attr-defined]  # keep pytest from collecting it when imported
