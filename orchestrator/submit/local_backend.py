"""Run a job on this machine, beside the Slurm backends (as submitit keeps ``local/`` beside
``slurm/``): one CPU process per rank under a supervisor (:mod:`sporch.orchestrator.submit.local_run`).

The job id is the supervisor's pid; its state comes from ``<job_dir>/local.json`` (written by
the supervisor, read by :mod:`sporch.orchestrator.jobs.local_state`) and whether that pid still
runs; cancel sends it SIGTERM, which ends the ranks. :meth:`LocalBackend.submit` starts a
detached supervisor (what a campaign runner calls); ``foreground=True`` names this process as
the supervisor instead (``sporch run --local``, which then runs the ranks itself, with a
progress bar).
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from typing import Sequence

from sporch.orchestrator.contract.job_files import LOG_LAYOUTS
from sporch.orchestrator.safe_files import open_append
from sporch.orchestrator.host import LOCAL, Host
from sporch.orchestrator.submit.backend import Submitted
from sporch.orchestrator.submit.request import SubmitRequest

LOGS = LOG_LAYOUTS["local"]


class LocalBackend:
    name = "local"

    def __init__(self, host: Host = LOCAL, *, foreground: bool = False) -> None:
        self.host = host  # this machine (get_backend refuses a remote host)
        self.foreground = foreground

    def submit(self, request: SubmitRequest) -> Submitted:
        """Start a detached supervisor for the request's (written) job dir; in the foreground,
        this process is the supervisor and starts nothing here."""
        if self.foreground:
            return Submitted(backend_job_id=str(os.getpid()), backend=self.name, logs=dict(LOGS))
        files = request.job.files
        with open_append(files.path("logs", "supervisor.log")) as log:
            proc = subprocess.Popen([sys.executable, "-m", "sporch.orchestrator.submit.local_run", files.plan, files.job_dir],
                                    stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                    start_new_session=True)
        return Submitted(backend_job_id=str(proc.pid), backend=self.name, logs=dict(LOGS))

    def cancel(self, job_ids: Sequence[str]) -> None:
        for pid in job_ids:
            try:
                os.kill(int(pid), signal.SIGTERM)
            except (ProcessLookupError, ValueError):
                pass
