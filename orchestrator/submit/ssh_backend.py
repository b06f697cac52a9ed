"""Submit the rendered batch script on the cluster's login host over ssh.

The same script and log layout as :mod:`.sbatch_backend`; the job dir is a path on the login
host and its files (``plan.json``, ``job.sbatch``, ``logs/``) went there over SFTP
(:func:`orchestrator.submit.submitter.write_files`). ``login.setup`` lines and
``cd <job_dir> && sbatch --parsable job.sbatch`` run in one remote shell command, so the job
inherits that shell's environment (PATH, PYTHONPATH: put them into ``login.setup``).
"""

from __future__ import annotations

from orchestrator.submit.backend import Submitted
from orchestrator.submit.request import SubmitRequest
from orchestrator.submit.sbatch_backend import LOGS


class SshBackend:
    name = "sbatch"  # what Slurm gets and the log layout are sbatch's; the record's `remote` says where

    def __init__(self, host) -> None:  # host: orchestrator.remote.ssh.SshHost (connected)
        self.host = host

    def runner(self):
        from orchestrator.remote.ssh import SshRunner

        return SshRunner(self.host)

    def submit(self, request: SubmitRequest) -> Submitted:
        from orchestrator.render import SCRIPT_FILE
        from orchestrator.slurm.commands import sbatch

        job_id = sbatch(script=SCRIPT_FILE, cwd=request.job_dir, runner=self.runner())
        return Submitted(slurm_job_id=job_id, backend=self.name, logs=dict(LOGS))
