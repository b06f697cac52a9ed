"""The submission backends by name: ``submitit`` (default), ``sbatch``, ``local``."""

from __future__ import annotations

from typing import Dict

from sporch.orchestrator.errors import SporchError
from sporch.orchestrator.host import LOCAL, Host
from sporch.orchestrator.submit.backend import REMOTE_BACKEND, Backend, remote_backend_error
from sporch.orchestrator.submit.local_backend import LocalBackend
from sporch.orchestrator.submit.sbatch_backend import SbatchBackend
from sporch.orchestrator.submit.submitit_backend import SubmititBackend

#: backend name -> class (built with the Host the job dir lives on)
BACKENDS: Dict[str, type] = {"submitit": SubmititBackend, "sbatch": SbatchBackend, "local": LocalBackend}


def get_backend(name: str, host: Host = LOCAL, cluster: str = "") -> Backend:
    """The backend ``name`` submitting on ``host``."""
    if name not in BACKENDS:
        raise SporchError(f"unknown submission backend {name!r}; choose one of: {', '.join(sorted(BACKENDS))}")
    if host.remote and name != REMOTE_BACKEND:
        raise remote_backend_error(name, cluster)
    return BACKENDS[name](host)
