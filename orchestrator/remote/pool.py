"""A connection per login host, reused within one process (status polls, ``logs -f``):
:func:`connect` and :func:`close_all` (also run at exit).
"""

from __future__ import annotations

import atexit
from typing import Any, Dict, Tuple

from sporch.orchestrator.remote.login import login_dict
from sporch.orchestrator.remote.ssh import SshHost

_POOL: Dict[Tuple[Any, ...], SshHost] = {}


def connect(login: Any) -> SshHost:
    """A connected SshHost for ``login`` (LoginSpec or dict), reused while it stays alive."""
    d = login_dict(login)
    key = tuple((k, tuple(v) if isinstance(v, list) else v) for k, v in sorted(d.items()))
    h = _POOL.get(key)
    if h is not None and h.is_active():
        return h
    if h is not None:
        h.close()
    h = SshHost.from_login(d).connect()
    if not _POOL:
        atexit.register(close_all)
    _POOL[key] = h
    return h


def close_all() -> None:
    for h in list(_POOL.values()):
        h.close()
    _POOL.clear()
