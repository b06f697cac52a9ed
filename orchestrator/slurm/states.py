"""Slurm job states and exit codes.

Accepts what squeue prints with ``%T`` (``RUNNING``) or ``%t`` (``R``) and what sacct prints in
``State`` (``CANCELLED by 0``, ``COMPLETED``, ``REQUEUED``, truncated ``CANCELLED+``), and
``ExitCode``/``DerivedExitCode`` (``0:15`` = return code 0, killed by signal 15).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Optional

from sporch.orchestrator.contract.numbers import is_digits

#: The job ended; it will not run again (unless someone requeues it by hand).
TERMINAL_STATES = frozenset({
    "BOOT_FAIL", "CANCELLED", "COMPLETED", "DEADLINE", "FAILED", "NODE_FAIL", "OUT_OF_MEMORY",
    "PREEMPTED", "REVOKED", "TIMEOUT",
})
#: Waiting, running, or on its way back into the queue.
ACTIVE_STATES = frozenset({
    "CONFIGURING", "COMPLETING", "PENDING", "RESIZING", "RESV_DEL_HOLD", "REQUEUED", "REQUEUE_FED",
    "REQUEUE_HOLD", "RUNNING", "SIGNALING", "SPECIAL_EXIT", "STAGE_OUT", "STOPPED", "SUSPENDED",
    "UPDATE_DB", "POWER_UP_NODE",
})
#: Terminal states that mean the job did not do its work because of the machine, not the job
#: (worth a resubmission).
INFRA_FAILURES = frozenset({"BOOT_FAIL", "NODE_FAIL", "PREEMPTED"})

#: squeue ``%t`` compact codes.
SHORT_CODES = {
    "BF": "BOOT_FAIL", "CA": "CANCELLED", "CD": "COMPLETED", "CF": "CONFIGURING", "CG": "COMPLETING",
    "DL": "DEADLINE", "F": "FAILED", "NF": "NODE_FAIL", "OOM": "OUT_OF_MEMORY", "PD": "PENDING",
    "PR": "PREEMPTED", "R": "RUNNING", "RD": "RESV_DEL_HOLD", "RF": "REQUEUE_FED", "RH": "REQUEUE_HOLD",
    "RQ": "REQUEUED", "RS": "RESIZING", "RV": "REVOKED", "SI": "SIGNALING", "SE": "SPECIAL_EXIT",
    "SO": "STAGE_OUT", "ST": "STOPPED", "S": "SUSPENDED", "TO": "TIMEOUT",
}
_KNOWN = TERMINAL_STATES | ACTIVE_STATES


@dataclass(frozen=True)
class ExitCode:
    """``returncode:signal`` as sacct prints it (``0:15`` = killed by SIGTERM)."""

    returncode: int
    signal: int = 0

    @property
    def ok(self) -> bool:
        return self.returncode == 0 and self.signal == 0

    def __str__(self) -> str:
        return f"{self.returncode}:{self.signal}"


def parse_exit_code(text: Optional[str]) -> Optional[ExitCode]:
    """``"0:15"`` -> ExitCode(0, 15); ``"1"`` -> ExitCode(1, 0); empty/unknown -> None."""
    if text is None:
        return None
    m = re.fullmatch(r"\s*(-?\d+)(?::(\d+))?\s*", str(text))
    if not m:
        return None
    return ExitCode(int(m.group(1)), int(m.group(2) or 0))


@dataclass(frozen=True)
class JobState:
    """One job's state. ``name`` is the canonical upper-case state (``CANCELLED``)."""

    name: str
    raw: str = ""
    by_uid: Optional[int] = None  # "CANCELLED by 1000"
    reason: Optional[str] = None  # squeue %r / sacct Reason, None when "None"
    exit_code: Optional[ExitCode] = None
    elapsed: Optional[str] = None  # squeue %M / sacct Elapsed ("1:02", "00:01:02")
    nodelist: Optional[str] = None  # squeue %N / sacct NodeList ("node[1-2]"), None before allocation

    @property
    def terminal(self) -> bool:
        return self.name in TERMINAL_STATES

    @property
    def active(self) -> bool:
        """Pending, running or coming back. Unknown states count as active (keep watching)."""
        return not self.terminal

    @property
    def known(self) -> bool:
        return self.name in _KNOWN

    @property
    def completed(self) -> bool:
        """Finished on its own with exit code 0 (when the exit code is known)."""
        return self.name == "COMPLETED" and (self.exit_code is None or self.exit_code.ok)

    @property
    def failed(self) -> bool:
        return self.terminal and not self.completed

    @property
    def infra_failure(self) -> bool:
        return self.name in INFRA_FAILURES

    def __str__(self) -> str:
        return self.raw or self.name


def parse_state(text: str, *, reason: Optional[str] = None, exit_code: Optional[str] = None,
                elapsed: Optional[str] = None, nodelist: Optional[str] = None) -> JobState:
    """Parse a state as squeue or sacct prints it.

    ``"CANCELLED by 0"`` -> CANCELLED (by_uid=0); ``"R"`` -> RUNNING; ``"CANCELLED+"`` (sacct's
    truncation mark) -> CANCELLED; ``"running"`` -> RUNNING. Unknown words are kept as they are.
    """
    raw = (text or "").strip()
    words = raw.split()
    head = words[0].rstrip("+").upper() if words else "UNKNOWN"
    by_uid = None
    if len(words) >= 3 and words[1].lower() == "by" and is_digits(words[2]):
        by_uid = int(words[2])
    name = SHORT_CODES.get(head, head)
    if reason is not None:
        reason = reason.strip()
        if reason in ("", "None", "(null)"):
            reason = None
    elapsed = (elapsed or "").strip() or None
    nodelist = (nodelist or "").strip()
    return JobState(name=name, raw=raw, by_uid=by_uid, reason=reason, exit_code=parse_exit_code(exit_code),
                    elapsed=elapsed, nodelist=None if nodelist in ("", "None assigned", "(null)") else nodelist)


def is_terminal(text: str) -> bool:
    return parse_state(text).terminal


def is_active(text: str) -> bool:
    return parse_state(text).active
