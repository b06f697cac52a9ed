"""Run a job on this machine, beside the Slurm backends (as submitit keeps ``local/`` beside
``slurm/``): one CPU process per rank under a supervisor (:mod:`sporch.orchestrator.submit.local_run`).

The job id is the supervisor's pid; its state comes from ``<job_dir>/local.json`` (written by
the supervisor) and whether that pid still runs; cancel sends it SIGTERM, which ends the ranks.
``sporch run --local`` is the supervisor itself (in the foreground, with a progress bar);
:meth:`LocalBackend.submit` starts a detached one (what a campaign runner calls).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from typing import Dict, Sequence, Tuple

from sporch.orchestrator.host import LOCAL, Host
from sporch.orchestrator.jobs.status import SlurmRow
from sporch.orchestrator.jobs.store import JobRecord
from sporch.orchestrator.submit.local_run import state_path
from sporch.orchestrator.contract.files import LOG_LAYOUTS, JobFiles
from sporch.orchestrator.submit.backend import Submitted
from sporch.orchestrator.submit.request import SubmitRequest

LOGS = LOG_LAYOUTS["local"]


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


class LocalBackend:
    name = "local"
    queue = "local"

    def __init__(self, host: Host = LOCAL) -> None:
        self.host = host  # this machine (get_backend refuses a remote host)

    def submit(self, request: SubmitRequest) -> Submitted:
        """Start a detached supervisor for the request's (written) job dir."""
        files = request.job.files
        with open(files.path("logs", "supervisor.log"), "ab") as log:
            proc = subprocess.Popen([sys.executable, "-m", "sporch.orchestrator.submit.local_run", files.plan, files.job_dir],
                                    stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                    start_new_session=True)
        return Submitted(slurm_job_id=str(proc.pid), backend=self.name, logs=dict(LOGS))

    def query(self, records: Sequence[JobRecord]) -> Tuple[Dict[str, SlurmRow], Dict[str, str], bool]:
        """(rows by job id, source by job id, accounting): from each supervisor's state file and pid."""
        rows: Dict[str, SlurmRow] = {}
        for rec in records:
            text = self.host.read_text(state_path(rec.job_dir))
            state = json.loads(text) if text else {}
            final = state.get("state") not in (None, "RUNNING")
            if final:
                rows[rec.slurm_job_id] = SlurmRow(state["state"], reason=state.get("reason"),
                                                  exit_code=state.get("exit_code"))
            elif pid_alive(int(rec.slurm_job_id)):
                rows[rec.slurm_job_id] = SlurmRow("RUNNING" if state else "PENDING")
            elif self.host.read_text(JobFiles(rec.job_dir).result) is None:
                rows[rec.slurm_job_id] = SlurmRow("FAILED", reason="the local run ended without a result")
        return rows, {i: "local" for i in rows}, False

    def cancel(self, job_ids: Sequence[str]) -> None:
        for pid in job_ids:
            try:
                os.kill(int(pid), signal.SIGTERM)
            except (ProcessLookupError, ValueError):
                pass

