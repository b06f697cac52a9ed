"""Recording campaign directories into the history store: :func:`record_dir` (``campaign run``,
``status`` and ``report`` record the directory's completed points each time), :func:`record_quietly`
(the same, a problem returned as a warning) and :func:`rebuild` (a store re-created from the
result files alone equals the live one).
"""

from __future__ import annotations

import os
import sqlite3
from pathlib import Path
from typing import Dict, Optional, Sequence

from sporch.orchestrator.campaign.history_runs import is_campaign, read_runs
from sporch.orchestrator.campaign.history_store import Store, check_store, store_error, store_path
from sporch.orchestrator.safe_files import output_file
from sporch.orchestrator.errors import SporchError


def record_dir(root: str | os.PathLike, path: str | os.PathLike) -> int:
    """Record the completed points of campaign directory ``root`` into the store at ``path``."""
    runs = read_runs(root)
    with Store.create(path) as store:
        return store.record(runs)


def record_quietly(root: str | os.PathLike, explicit: Optional[str | os.PathLike] = None) -> Optional[str]:
    """:func:`record_dir` into the default store (nothing when recording is off); a problem is
    returned as a warning line, never raised: a campaign runs and reports without its history."""
    path = store_path(explicit)
    if path is None:
        return None
    try:
        record_dir(root, path)
    except (SporchError, OSError, sqlite3.Error) as exc:
        return f"history not recorded ({exc})"
    return None


def rebuild(dirs: Sequence[str | os.PathLike], path: str | os.PathLike) -> Dict[str, int]:
    """Re-create the store at ``path`` from the result files of the campaign directories
    ``dirs`` alone; returns the runs found per directory. A directory that is not a campaign,
    or directories that hold no completed run, are refused (the store is left as it is); a
    file at ``path`` that is not a sporch store is never touched. The new store is made in a
    private folder beside ``path`` and renamed over it only when complete."""
    path = Path(path)
    for d in dirs:
        if not Path(d).is_dir():
            raise SporchError(f"campaign directory {d} not found")
        if not is_campaign(d):
            raise SporchError(f"{d} is not a campaign directory (no manifest.json, no points/<id>/point.json); "
                              "--rebuild reads the folders `sporch campaign run` made; the store is left as it is")
    found = {str(d): read_runs(d) for d in dirs}  # every directory is read before anything is written
    if not any(found.values()):
        raise SporchError(f"{', '.join(map(str, dirs))} hold(s) no completed run: a rebuild from them would empty "
                          f"the store; {path} is left as it is")
    check_store(path, writing=True)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        with output_file(path, replace=True) as tmp:
            with Store.create(tmp) as store:
                for runs in found.values():
                    store.record(runs)
    except OSError as exc:
        raise store_error(path, exc) from None
    return {d: len(runs) for d, runs in found.items()}
