"""The backend interface: turn a :class:`SubmitRequest` whose files are already in ``job_dir``
into a job, say where its logs go, and cancel it.

Backends are small modules (submitit's ``core/`` + one folder per scheduler is the model); each
is built with the :class:`~sporch.orchestrator.host.Host` the job dir lives on:

- ``submitit``  (:mod:`.submitit_backend`, default): submitit's SlurmExecutor with the Plan's
  resources; every task calls :func:`sporch.orchestrator.submit.task.run_rank`. This machine only:
  submitit needs a filesystem shared with the cluster and the submitter's Python.
- ``sbatch``    (:mod:`.sbatch_backend`): ``sbatch --parsable <job_dir>/job.sbatch``, the exact
  script ``sporch submit --dry-run`` shows; here, or on a login host over ssh.
- ``local``     (:mod:`.local_backend`): the ranks as CPU processes on this machine under a
  supervisor (``sporch run --local``).

One small interface, what ``sporch submit/run/cancel`` and a campaign runner call: ``submit``
a request whose files are in its job dir, ``cancel`` job ids. Asking where jobs stand is not a
backend's business: :mod:`sporch.orchestrator.jobs.status` asks Slurm (squeue, sacct) or a local
run's supervisor. :mod:`.registry` maps the names to the classes.

A backend raises a one-line :class:`~sporch.orchestrator.errors.SporchError` (usually a
``SlurmCommandError`` quoting Slurm's reason) when the job is not accepted; the caller then
removes the job dir.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Dict, Protocol, Sequence

from sporch.orchestrator.errors import SporchError
from sporch.orchestrator.submit.request import SubmitRequest

DEFAULT_BACKEND = "submitit"
#: What a cluster with a login section (ssh) submits through.
REMOTE_BACKEND = "sbatch"


@dataclass(frozen=True)
class Submitted:
    """A job the backend accepted. ``logs``: kind -> path relative to the job dir, with ``{job_id}``
    and ``{rank}`` placeholders (kinds: batch_out, batch_err, rank_out, rank_err)."""

    #: the backend's id of the job: the Slurm job id (submitit, sbatch) or the local supervisor's pid
    backend_job_id: str
    backend: str
    logs: Dict[str, str] = field(default_factory=dict)


class Backend(Protocol):
    name: str

    def submit(self, request: SubmitRequest) -> Submitted:
        """Submit; return the job id. Raise SporchError (one line) when rejected."""
        ...

    def cancel(self, job_ids: Sequence[str]) -> None:
        """Cancel jobs this backend submitted (finished ones are left alone)."""
        ...


def remote_backend_error(name: str, cluster: str = "") -> SporchError:
    where = f"cluster {cluster} " if cluster else "a cluster with a login section "
    return SporchError(f"--via {name} does not work on {where}(remote, over ssh): submitit needs a filesystem "
                       "shared with the cluster and this machine's Python; use --via sbatch (the default there)")
