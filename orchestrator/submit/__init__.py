"""Submission.

- :mod:`.request`   a pure SubmitRequest (plan, rendered script, job dir, destination); dry run
- :mod:`.backend`   the backend interface (``submit``, ``cancel``) and what a submission returns
- :mod:`.registry`  the backends by name (``submitit`` default, ``sbatch``, ``local``)
- :mod:`.submitter` job dir + backend + record, atomically; ``sbatch --test-only`` checks
- :mod:`.task`      what each submitit task runs (``python -m sporch.runtime.launch`` with the Plan)
- :mod:`.local_run` the local supervisor: the ranks as CPU processes on this machine
"""
