"""The hang's keys in the job's rendezvous store, and the calls the watchdog makes on it.

``store``: the c10d ``Store`` (``set``, ``add``, ``check``, ``get``) every rank shares, or None (the
rank watches only itself: every call here then does nothing). A store that went away is not an
error: the call returns as if nothing were there, and the waits are bounded by their seconds.
"""

from __future__ import annotations

import time
from typing import Any

__all__ = ["ALERT_KEY", "DUMPED_KEY", "RECORDED_KEY", "DONE_KEY", "HOST_KEY", "publish_host", "alerted",
           "store_call", "await_count", "await_key", "hosts"]

#: Keys in the rendezvous store.
ALERT_KEY = "sporch/hang/alert"
DUMPED_KEY = "sporch/hang/dumped"
RECORDED_KEY = "sporch/hang/recorded"
DONE_KEY = "sporch/hang/done"
HOST_KEY = "sporch/hang/host/{rank}"


def publish_host(store: Any, rank: int, host: str | None) -> None:
    """Tell the store this rank's host (one key, for the diagnosis)."""
    if store is not None and host:
        try:
            store.set(HOST_KEY.format(rank=rank), host)
        except Exception:  # noqa: BLE001 - the host is a nicety of the diagnosis
            pass


def alerted(store: Any) -> bool:
    """Whether some rank raised the alert."""
    if store is None:
        return False
    try:
        return bool(store.check([ALERT_KEY]))
    except Exception:  # noqa: BLE001 - a store that went away: the collectives fail on their own
        return False


def store_call(store: Any, op: str, key: str, value: Any) -> Any:
    """``store.<op>(key, value)``; None without a store or when the call fails."""
    if store is None:
        return None
    try:
        return getattr(store, op)(key, value)
    except Exception:  # noqa: BLE001 - a store that went away: the grace below bounds the wait
        return None


def await_count(store: Any, key: str, count: int, seconds: float, poll_s: float) -> None:
    """Wait until counter ``key`` reaches ``count`` (every rank added to it), at most ``seconds``."""
    deadline = time.monotonic() + seconds
    while store is not None and time.monotonic() < deadline:
        now = store_call(store, "add", key, 0)
        if now is None or int(now) >= count:
            return
        time.sleep(min(0.2, poll_s))


def await_key(store: Any, key: str, seconds: float, poll_s: float) -> None:
    """Wait until ``key`` is set, at most ``seconds``."""
    deadline = time.monotonic() + seconds
    while store is not None and time.monotonic() < deadline:
        try:
            if store.check([key]):
                return
        except Exception:  # noqa: BLE001
            return
        time.sleep(min(0.2, poll_s))


def hosts(store: Any, ranks: set[int]) -> dict[int, str]:
    """The hosts the first 16 of ``ranks`` published (those that did)."""
    out: dict[int, str] = {}
    for r in sorted(ranks)[:16]:
        key = HOST_KEY.format(rank=r)
        try:
            if store is not None and store.check([key]):
                out[r] = store.get(key).decode("utf-8", "replace")
        except Exception:  # noqa: BLE001
            pass
    return out
