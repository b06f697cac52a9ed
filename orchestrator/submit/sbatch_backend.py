"""Submit the rendered batch script as it is: ``sbatch --parsable <job_dir>/job.sbatch``.

The script (``templates/sbatch.j2``) is the one ``sporch submit --dry-run`` prints; its logs are
``<job_dir>/logs/<jobid>.out|err`` and ``<job_dir>/logs/<jobid>_<rank>.out|err``.
"""

from __future__ import annotations

from orchestrator.errors import SporchError
from orchestrator.submit.backend import Submitted
from orchestrator.submit.request import SubmitRequest

LOGS = {
    "batch_out": "logs/{job_id}.out",
    "batch_err": "logs/{job_id}.err",
    "rank_out": "logs/{job_id}_{rank}.out",
    "rank_err": "logs/{job_id}_{rank}.err",
}


class SbatchBackend:
    name = "sbatch"

    def submit(self, request: SubmitRequest) -> Submitted:
        from orchestrator.slurm.commands import sbatch

        if request.remote:
            raise SporchError("remote submission (cluster.login) is not available yet; submit on the login node")
        # run from the submitter's directory, like submitit: tasks start there (and see its modules)
        job_id = sbatch(script=request.script_path)
        return Submitted(slurm_job_id=job_id, backend=self.name, logs=dict(LOGS))
