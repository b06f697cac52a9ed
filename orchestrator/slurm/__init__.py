"""A thin, tested layer over the Slurm command-line tools (sbatch, squeue, sacct, scancel,
scontrol, sinfo).

Torch-free and light: only the standard library is imported. Failures become one-line
:class:`~sporch.orchestrator.errors.SporchError` messages carrying Slurm's own reason.

- :mod:`.commands`   run a Slurm tool with a timeout; ``sbatch``/``scancel``/... wrappers
- :mod:`.states`     job state and exit code parsing (terminal vs active)
- :mod:`.query`      ``squeue_states``, ``sacct_states`` (one call for many jobs), ``test_only``
- :mod:`.rows`       ``SlurmRow`` per job id: ``squeue_rows``, ``sacct_rows``, ``slurm_query``
- :mod:`.discover`   build a cluster descriptor from ``scontrol``/``sinfo``
- :mod:`.directives` ``#SBATCH`` lines and srun options: what a value may hold
- :mod:`.container`  the container section and what it adds to the srun line

Import the submodule you need: this file imports nothing, so reading a cluster file (which
checks its container and directives) does not load the command runners (subprocess, ssh).
"""
