"""Where a local run stands: its supervisor's state file and pid.

A local run (``sporch run --local``, a campaign's ``--local`` points, the ``local`` backend)
has no scheduler; the process that runs its ranks (:mod:`sporch.orchestrator.submit.local_run`)
is its supervisor: its pid is the job id the record keeps, and it writes
``<job_dir>/local.json`` (:data:`STATE_FILE`: ``pid``, then the final ``state`` COMPLETED |
FAILED | CANCELLED and the ranks' exit codes). :func:`local_rows` turns that into the rows
``sporch status`` reads for Slurm jobs from squeue and sacct.
"""

from __future__ import annotations

import fcntl
import json
import os
from typing import Dict, Sequence, Tuple

from sporch.orchestrator.contract.job_files import JobFiles
from sporch.orchestrator.errors import SporchError
from sporch.orchestrator.host import LOCAL, Host
from sporch.orchestrator.jobs.store import JobRecord
from sporch.orchestrator.slurm.rows import SlurmRow

#: The supervisor's state file in the job dir.
STATE_FILE = "local.json"


#: Locked by a run's supervisor and inherited by its ranks: held while any of them is alive.
RANKS_LOCK = ".ranks.lock"


def hold_ranks_lock(job_dir: str) -> int:
    """An open descriptor holding the job dir's ranks lock (for the supervisor, passed on to its
    ranks); a SporchError when a previous run's supervisor or ranks still hold it."""
    fd = os.open(JobFiles(job_dir).path(RANKS_LOCK), os.O_RDWR | os.O_CREAT, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        os.close(fd)
        raise SporchError(f"{job_dir}: ranks of a previous run are still alive there (they hold {RANKS_LOCK}); "
                          "end them (`sporch cancel`, or kill them) before running it again") from None
    return fd


def state_path(job_dir: str) -> str:
    return JobFiles(job_dir).path(STATE_FILE)


def write_state(job_dir: str, **state) -> None:
    """This process (the supervisor) says where the run stands."""
    LOCAL.write_text(state_path(job_dir), json.dumps({"pid": os.getpid(), **state}, indent=2) + "\n")


def pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:  # a zombie child of this process has ended
        with open(f"/proc/{pid}/stat", encoding="ascii") as fh:
            return fh.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return True


def local_rows(records: Sequence[JobRecord], host: Host = LOCAL
               ) -> Tuple[Dict[str, SlurmRow], Dict[str, str], bool]:
    """(rows by job id, source by job id, accounting): from each supervisor's state file and pid."""
    rows: Dict[str, SlurmRow] = {}
    for rec in records:
        text = host.read_text(state_path(rec.job_dir))
        try:
            state = json.loads(text) if text else {}
        except ValueError:
            state = {}
        final = state.get("state") not in (None, "RUNNING")
        if final:
            rows[rec.backend_job_id] = SlurmRow(state["state"], reason=state.get("reason"),
                                              exit_code=state.get("exit_code"))
        elif pid_alive(int(rec.backend_job_id)):
            rows[rec.backend_job_id] = SlurmRow("RUNNING" if state else "PENDING")
        elif host.read_text(JobFiles(rec.job_dir).result) is None:
            rows[rec.backend_job_id] = SlurmRow("FAILED", reason="the local run ended without a result")
    return rows, {i: "local" for i in rows}, False
