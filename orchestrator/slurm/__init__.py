"""A thin, tested layer over the Slurm command-line tools (sbatch, squeue, sacct, scancel,
scontrol, sinfo).

Torch-free and light: only the standard library is imported. Failures become one-line
:class:`~sporch.orchestrator.errors.SporchError` messages carrying Slurm's own reason.

- :mod:`.commands`  run a Slurm tool with a timeout; ``sbatch``/``scancel``/... wrappers
- :mod:`.states`    job state and exit code parsing (terminal vs active)
- :mod:`.query`     ``squeue_states``, ``sacct_states`` (one call for many jobs), ``test_only``
- :mod:`.rows`      ``SlurmRow`` per job id: ``squeue_rows``, ``sacct_rows``, ``slurm_query``
- :mod:`.discover`  build a cluster descriptor from ``scontrol``/``sinfo``
"""

from sporch.orchestrator.slurm.commands import SlurmCommandError, run_slurm, slurm_reason
from sporch.orchestrator.slurm.states import ExitCode, JobState, parse_exit_code, parse_state

__all__ = [
    "ExitCode",
    "JobState",
    "SlurmCommandError",
    "parse_exit_code",
    "parse_state",
    "run_slurm",
    "slurm_reason",
]
