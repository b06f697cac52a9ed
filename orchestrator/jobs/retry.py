"""Ride out transient outages: slurmctld restarting, slurmdbd down, the login host's sshd dropped.

``retry_unreachable(fn, grace_s=...)`` calls ``fn`` again, with exponential backoff (1 s, 2 s, 4 s,
... at most 30 s), while it raises :class:`~sporch.orchestrator.errors.Unreachable`; after ``grace_s``
seconds of failures it gives up with an Unreachable error (exit code 75,
:data:`~sporch.orchestrator.errors.EXIT_UNREACHABLE`). Other errors pass at once.
"""

from __future__ import annotations

import time
from typing import Callable, Optional, TypeVar

from sporch.orchestrator.contract import settings
from sporch.orchestrator.errors import SporchError, Unreachable

T = TypeVar("T")
#: Longest pause between two tries.
MAX_DELAY_S = 30.0
#: The grace of a command that watches (``wait``, ``campaign run``) when neither ``--grace`` nor
#: ``$SPORCH_GRACE_S`` says: long enough to ride out a slurmctld restart or a dropped sshd.
DEFAULT_GRACE_S = 300.0
#: The grace of a command that looks once (``status``, ``campaign status``). Shorter on purpose:
#: a person waits at the prompt for one answer, and a minute tells an outage from a hiccup.
STATUS_GRACE_S = 60.0


def default_grace(fallback: float, given: Optional[float] = None) -> float:
    """``given`` (a command's ``--grace``) when set, else ``$SPORCH_GRACE_S`` when set (a finite
    number of seconds >= 0), else ``fallback``; any other value of the variable is refused
    (SporchError, one line) rather than read as "retry forever"."""
    if given is not None:
        return given
    try:
        value = settings.read(settings.GRACE_S)
    except ValueError as exc:
        raise SporchError(f"{exc}; unset it or pass --grace") from None
    return fallback if value is None else value


def retry_unreachable(fn: Callable[[], T], *, grace_s: float,
                      on_retry: Optional[Callable[[Unreachable, float, float], None]] = None,
                      sleep: Callable[[float], None] = time.sleep,
                      clock: Callable[[], float] = time.monotonic) -> T:
    """``fn()``, tried again while it raises Unreachable, for up to ``grace_s`` seconds;
    ``on_retry(error, pause_s, grace_left_s)`` before each pause."""
    first: Optional[float] = None
    delay = 1.0
    while True:
        try:
            return fn()
        except Unreachable as exc:
            now = clock()
            first = now if first is None else first
            left = grace_s - (now - first)
            if left <= 0:
                raise Unreachable(f"{exc} (gave up after retrying for {grace_s:g} s)") from None
            pause = min(delay, left)
            if on_retry is not None:
                on_retry(exc, pause, left)
            sleep(pause)
            delay = min(delay * 2, MAX_DELAY_S)
