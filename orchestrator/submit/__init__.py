"""Submission.

- :mod:`.request`   a pure SubmitRequest (plan, rendered script, job dir, destination); dry run
- :mod:`.backend`   the backend interface and registry (``submitit`` default, ``sbatch``)
- :mod:`.submitter` job dir + backend + record, atomically; ``sbatch --test-only`` checks
- :mod:`.task`      what each submitit task runs (``sporch.runtime.launch`` with the Plan)
"""
