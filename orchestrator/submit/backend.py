"""The backend interface: turn a :class:`SubmitRequest` whose files are already in ``job_dir``
into a Slurm job, and say where its logs go.

Backends are small modules (submitit's ``core/`` + one folder per scheduler is the model):

- ``submitit``  (:mod:`.submitit_backend`, default): submitit's SlurmExecutor with the Plan's
  resources; every task calls :func:`orchestrator.submit.task.run_rank`.
- ``sbatch``    (:mod:`.sbatch_backend`): ``sbatch --parsable <job_dir>/job.sbatch``, the exact
  script ``sporch submit --dry-run`` shows.

Clusters with a ``login`` section submit from anywhere over ssh (:func:`get_remote_backend`):
only ``sbatch`` (:mod:`.ssh_backend`: the same script, files over SFTP, sbatch on the login
host); submitit needs a filesystem shared with the cluster and the submitter's Python.

A backend raises a one-line :class:`~orchestrator.errors.SporchError` (usually a
``SlurmCommandError`` quoting Slurm's reason) when the job is not accepted; the caller then
removes the job dir.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from importlib import import_module
from typing import Dict, Protocol

from orchestrator.errors import SporchError
from orchestrator.submit.request import SubmitRequest

#: backend name -> "module:class"
BACKENDS: Dict[str, str] = {
    "submitit": "orchestrator.submit.submitit_backend:SubmititBackend",
    "sbatch": "orchestrator.submit.sbatch_backend:SbatchBackend",
}
DEFAULT_BACKEND = "submitit"


@dataclass(frozen=True)
class Submitted:
    """A job Slurm accepted. ``logs``: kind -> path relative to the job dir, with ``{job_id}``
    and ``{rank}`` placeholders (kinds: batch_out, batch_err, rank_out, rank_err)."""

    slurm_job_id: str
    backend: str
    logs: Dict[str, str] = field(default_factory=dict)


class Backend(Protocol):
    name: str

    def submit(self, request: SubmitRequest) -> Submitted:
        """Submit; return the Slurm job id. Raise SporchError (one line) when rejected."""
        ...


def get_backend(name: str) -> Backend:
    if name not in BACKENDS:
        raise SporchError(f"unknown submission backend {name!r}; choose one of: {', '.join(sorted(BACKENDS))}")
    module, _, attr = BACKENDS[name].partition(":")
    return getattr(import_module(module), attr)()


#: Backends that work over ssh (cluster.login).
REMOTE_BACKENDS: Dict[str, str] = {
    "sbatch": "orchestrator.submit.ssh_backend:SshBackend",
}


def remote_backend_error(name: str, cluster: str = "") -> SporchError:
    where = f"cluster {cluster} " if cluster else "a cluster with a login section "
    return SporchError(f"--via {name} does not work on {where}(remote, over ssh): submitit needs a filesystem "
                       "shared with the cluster and this machine's Python; use --via sbatch (the default there)")


def get_remote_backend(name: str, host, cluster: str = "") -> Backend:
    """A backend that submits on the login host ``host`` (a connected SshHost)."""
    if name not in REMOTE_BACKENDS:
        raise remote_backend_error(name, cluster)
    module, _, attr = REMOTE_BACKENDS[name].partition(":")
    return getattr(import_module(module), attr)(host)
