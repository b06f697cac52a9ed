"""Submit the rendered batch script as it is: ``sbatch --parsable <job_dir>/job.sbatch``, here
or on a cluster's login host (the Host the job dir lives on).

The script (``templates/sbatch.j2``) is the one ``sporch submit --dry-run`` prints; its logs are
``<job_dir>/logs/<jobid>.out|err`` and ``<job_dir>/logs/<jobid>_<rank>.out|err``. Over ssh,
``login.setup`` lines and ``cd <job_dir> && sbatch`` run in one remote shell command, so the job
inherits that shell's environment (PATH, PYTHONPATH: put them into ``login.setup``); here it runs
from the submitter's directory, like submitit (tasks start there and see its modules).
"""

from __future__ import annotations

from typing import Sequence

from sporch.orchestrator.host import LOCAL, Host
from sporch.orchestrator.contract.job_files import LOG_LAYOUTS
from sporch.orchestrator.slurm.commands import sbatch, scancel
from sporch.orchestrator.submit.backend import Submitted
from sporch.orchestrator.submit.request import SubmitRequest

LOGS = LOG_LAYOUTS["sbatch"]


class SbatchBackend:
    name = "sbatch"

    def __init__(self, host: Host = LOCAL) -> None:
        self.host = host

    def submit(self, request: SubmitRequest) -> Submitted:
        cwd = request.job_dir if self.host.remote else None
        job_id = sbatch(script=request.script_path, cwd=cwd, host=self.host)
        return Submitted(backend_job_id=job_id, backend=self.name, logs=dict(LOGS))

    def cancel(self, job_ids: Sequence[str]) -> None:
        scancel(list(job_ids), host=self.host)
