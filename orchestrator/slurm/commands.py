"""Run Slurm's command-line tools: timeouts, and one-line errors with Slurm's own reason."""

from __future__ import annotations

import os
import re
import subprocess
from typing import Iterable, Mapping, Optional, Sequence, Union

from orchestrator.errors import SporchError
from orchestrator.host import LOCAL, Host

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
            if not re.fullmatch(r"\d+(?:[_+][\d\[\]\-,%]+)?(?:\.\w+)?", part):
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
    :class:`orchestrator.remote.ssh.SshHost` runs it on the login host); return the completed
    process (text mode). Slurm's answers are parsed the same way either way.

    Raises :class:`SlurmCommandError` (a SporchError) when the tool is missing, does not answer
    within ``timeout`` seconds, or (with ``check``) exits non-zero.
    """
    host = host or LOCAL
    cmd = [str(c) for c in cmd]
    tool = os.path.basename(cmd[0])
    on = f" on {host.where}" if host.remote else ""
    try:
        rc, out, err = host.run(cmd, timeout=timeout, input=input, env=env, cwd=cwd)
    except TimeoutError:
        there = " there" if host.remote else ""
        raise SlurmCommandError(
            f"{tool} did not answer within {timeout:g} s{on}; is slurmctld up? (try `scontrol ping`{there})",
            tool=tool, reason="timeout", returncode=None) from None
    if rc == 127 and re.search(rf"\b{re.escape(tool)}\b.*(?:command )?not found", err or ""):
        fix = (f"not found on {host.where}; add the Slurm module/PATH to login.setup" if host.remote else
               "not found on PATH; run this where Slurm's client tools are installed "
               "(or start the loopback lab: scripts/slurmlab/start.sh)")
        raise SlurmCommandError(f"Slurm command {tool!r} {fix}", tool=tool, reason="command not found",
                                returncode=rc, stdout=out, stderr=err)
    proc = subprocess.CompletedProcess(cmd, rc, out, err)
    if check and proc.returncode != 0:
        reason = slurm_reason(proc.stderr, proc.stdout) or f"exit code {proc.returncode}"
        if tool in _SUBMITTERS:
            msg = f"Slurm rejected the job: {reason}"
        else:
            msg = f"{tool} failed: {reason}"
        raise SlurmCommandError(msg, tool=tool, reason=reason, returncode=proc.returncode,
                                stdout=proc.stdout, stderr=proc.stderr)
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
