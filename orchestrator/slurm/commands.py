"""Run Slurm's command-line tools: timeouts, and one-line errors with Slurm's own reason."""

from __future__ import annotations

import os
import re
import subprocess
from typing import Iterable, Mapping, Optional, Sequence, Union

from sporch.orchestrator.errors import SporchError, Unreachable
from sporch.orchestrator.host import LOCAL, Host

#: Seconds a Slurm client command may take before we give up (slurmctld down, network).
DEFAULT_TIMEOUT = 30.0

#: Tools whose failure means "the job was not accepted".
_SUBMITTERS = ("sbatch", "srun", "salloc")

# "sbatch: error: ", "slurm_load_jobs error: ", "scontrol: error: ", "allocation failure: ", ...
_PREFIX_RE = re.compile(
    r"^\s*(?:(?:[\w.-]+: )?(?:error|fatal)[:,]?\s+|slurm_\w+ error:\s*|allocation failure:\s*)",
    re.IGNORECASE,
)
_NOISE_RE = re.compile(r"^(?:Batch job submission failed|Unable to allocate resources|srun: error:)\s*:?\s*", re.I)

JobIds = Union[str, int, Iterable[Union[str, int]]]

#: Slurm's words for "the controller / database did not answer" (not a rejection).
_UNREACHABLE_RE = re.compile(
    r"unable to contact slurm controller|connection refused|socket timed out|communication connection failure|"
    r"zero bytes were transmitted|unable to connect to|connect failure|connection reset|"
    r"problem talking to the database|slurmdbd.*(?:not responding|down)|slurm_persist_conn_open", re.IGNORECASE)


def asked(host: Host, tool: str) -> str:
    """Which Slurm a command asked: ``sbatch on this machine`` | ``sbatch on login host u@h:22``."""
    return f"{tool} on login host {host.where}" if host.remote else f"{tool} on this machine"


def is_unreachable(reason: str) -> bool:
    """Whether Slurm's reason means it could not be reached (rather than that it said no)."""
    return bool(_UNREACHABLE_RE.search(reason or ""))


def command_failure(tool: str, reason: str, where: str, proc: Optional[subprocess.CompletedProcess] = None
                    ) -> "SlurmCommandError":
    """The one-line error of a Slurm tool that failed with ``reason``, saying which Slurm was
    asked (``where``: :func:`asked`); :class:`SlurmUnreachable` when Slurm could not be reached,
    else a rejection (of "the job" for sbatch/srun/salloc, of "the <tool> request" otherwise)."""
    kw = dict(tool=tool, reason=reason, returncode=proc.returncode if proc is not None else None,
              stdout=proc.stdout if proc is not None else "", stderr=proc.stderr if proc is not None else "")
    there = " there" if " on login host " in where else ""
    if is_unreachable(reason):
        return SlurmUnreachable(f"could not reach Slurm ({where}): {reason}; is slurmctld up? "
                                f"(try `scontrol ping`{there})", **kw)
    what = "the job" if tool in _SUBMITTERS else f"the {tool} request"
    return SlurmCommandError(f"Slurm rejected {what} ({where}): {reason}", **kw)


class SlurmCommandError(SporchError):
    """A Slurm tool failed. ``str(err)`` is one line; ``reason`` is Slurm's own words."""

    def __init__(self, message: str, *, tool: str, reason: str, returncode: Optional[int],
                 stdout: str = "", stderr: str = "") -> None:
        super().__init__(message)
        self.tool = tool
        self.reason = reason
        self.returncode = returncode
        self.stdout = stdout
        self.stderr = stderr


class SlurmUnreachable(SlurmCommandError, Unreachable):
    """A Slurm tool could not reach slurmctld (or slurmdbd), or did not answer in time."""


def slurm_reason(stderr: str, stdout: str = "") -> str:
    """Slurm's reason for a failure, in one line, without the ``tool: error:`` prefixes.

    The first error line wins: it is the most specific one (``invalid partition specified:
    foo`` comes before the generic ``Batch job submission failed: Invalid partition name``).
    """
    lines = [ln.strip() for ln in (stderr or "").splitlines() + (stdout or "").splitlines() if ln.strip()]
    errors = [ln for ln in lines if _PREFIX_RE.match(ln)]
    picked = errors[0] if errors else (lines[-1] if lines else "")
    reason = _PREFIX_RE.sub("", picked, count=1)
    reason = _PREFIX_RE.sub("", reason, count=1)  # "srun: error: Unable to allocate resources: ..."
    reason = _NOISE_RE.sub("", reason).strip()
    return reason or picked


def job_id_list(job_ids: JobIds) -> list[str]:
    """``12``, ``"12,13"`` or ``[12, "13_1"]`` -> ``["12", "13_1"]`` (order kept, no repeats)."""
    if isinstance(job_ids, (str, int)):
        job_ids = [job_ids]
    out: list[str] = []
    for j in job_ids:
        for part in str(j).split(","):
            part = part.strip()
            if not part:
                continue
            if not re.fullmatch(r"\d+(?:[_+][\d\[\]\-,%]+)?(?:\.\w+)?", part, re.ASCII):
                raise SporchError(f"not a Slurm job id: {part!r}")
            if part not in out:
                out.append(part)
    return out


def run_slurm(
    cmd: Sequence[str],
    *,
    timeout: float = DEFAULT_TIMEOUT,
    check: bool = True,
    input: Optional[str] = None,
    env: Optional[Mapping[str, str]] = None,
    cwd: Optional[str] = None,
    host: Optional[Host] = None,
) -> subprocess.CompletedProcess:
    """Run one Slurm tool on ``host`` (default: this machine; an
    :class:`sporch.orchestrator.remote.ssh.SshHost` runs it on the login host); return the completed
    process (text mode). Slurm's answers are parsed the same way either way.

    Raises :class:`SlurmCommandError` (a SporchError) when the tool is missing, does not answer
    within ``timeout`` seconds, or (with ``check``) exits non-zero.
    """
    host = host or LOCAL
    cmd = [str(c) for c in cmd]
    tool = os.path.basename(cmd[0])
    try:
        rc, out, err = host.run(cmd, timeout=timeout, input=input, env=env, cwd=cwd)
    except TimeoutError:
        there = " there" if host.remote else ""
        raise SlurmUnreachable(
            f"could not reach Slurm ({asked(host, tool)}): no answer within {timeout:g} s; is slurmctld up? "
            f"(try `scontrol ping`{there})", tool=tool, reason="timeout", returncode=None) from None
    if rc == 127 and re.search(rf"\b{re.escape(tool)}\b.*(?:command )?not found", err or ""):
        fix = (f"not found on {host.where}; add the Slurm module/PATH to login.setup" if host.remote else
               "not found on PATH; run this where Slurm's client tools are installed "
               "(or start the loopback lab: scripts/slurmlab/start.sh)")
        raise SlurmCommandError(f"Slurm command {tool!r} {fix}", tool=tool, reason="command not found",
                                returncode=rc, stdout=out, stderr=err)
    proc = subprocess.CompletedProcess(cmd, rc, out, err)
    if check and proc.returncode != 0:
        reason = slurm_reason(proc.stderr, proc.stdout) or f"exit code {proc.returncode}"
        raise command_failure(tool, reason, asked(host, tool), proc)
    return proc


# -- thin wrappers ----------------------------------------------------------------------------
def sbatch(args: Sequence[str] = (), script: Optional[str] = None, *, timeout: float = DEFAULT_TIMEOUT,
           env: Optional[Mapping[str, str]] = None, cwd: Optional[str] = None,
           host: Optional[Host] = None) -> str:
    """Submit a batch job; return its job id (``--parsable`` is added).

    ``script`` is a path; without it ``args`` must carry ``--wrap`` (or the script path).
    """
    cmd = ["sbatch", "--parsable", *args]
    if script is not None:
        cmd.append(str(script))
    out = run_slurm(cmd, timeout=timeout, env=env, cwd=cwd, host=host).stdout.strip()
    # --parsable prints "jobid" or "jobid;cluster" (possibly after warnings on other lines)
    for line in reversed(out.splitlines()):
        m = re.fullmatch(r"(\d+)(?:;\S+)?", line.strip())
        if m:
            return m.group(1)
    raise SlurmCommandError(f"sbatch printed no job id: {out!r}", tool="sbatch", reason=out, returncode=0,
                            stdout=out)


def scancel(job_ids: JobIds, *, signal: Optional[str] = None, batch_only: bool = False,
            timeout: float = DEFAULT_TIMEOUT, host: Optional[Host] = None) -> None:
    """Cancel (or signal) jobs. Unknown or finished job ids are not an error (scancel exits 0)."""
    ids = job_id_list(job_ids)
    if not ids:
        return
    cmd = ["scancel"]
    if signal:
        cmd.append(f"--signal={signal}")
    if batch_only:
        cmd.append("--batch")
    run_slurm([*cmd, *ids], timeout=timeout, host=host)


def requeue(job_ids: JobIds, *, timeout: float = DEFAULT_TIMEOUT, host: Optional[Host] = None) -> None:
    """``scontrol requeue``: the job goes back to PENDING (Reason=BeginTime for a few seconds)."""
    ids = job_id_list(job_ids)
    if ids:
        run_slurm(["scontrol", "requeue", ",".join(ids)], timeout=timeout, host=host)
