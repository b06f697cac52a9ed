"""Submissions whose job id may never have been recorded: write the intent first, find it again.

A runner stopped (SIGTERM, SIGKILL, a dropped ssh session, sbatch timing out while slurmctld
was busy) after sbatch accepted an array but before ``state.json`` recorded its job id would
otherwise submit the same points again on its next run, while the first array still runs. So
each submission goes into ``state.json`` as an *intent* (the array record without a job id,
plus a random token) before sbatch runs, and sbatch is given
``--comment=sporch-submission:<token>``; once sbatch answers, the intent becomes the array
(:meth:`CampaignState.record_array`).

:func:`reconcile` settles the intents an earlier run left: ONE ``squeue --me`` per host lists
the comments of the user's jobs. An intent whose token is there is adopted as that array (its
points are out, and are not submitted again); one that is not there was either never accepted
or has ended and been forgotten by slurmctld (nothing of it runs any more): it is dropped, and
its points are judged by their result files like any other.
"""

from __future__ import annotations

import datetime as _dt
import secrets
from typing import Any, Dict, List, Optional, Sequence, Tuple

from sporch.orchestrator.campaign.track import CampaignState, array_host
from sporch.orchestrator.host import Host
from sporch.orchestrator.slurm.query import squeue_comments

#: What the ``--comment`` of a campaign's job array starts with.
COMMENT_PREFIX = "sporch-submission:"


def new_intent(state: CampaignState, *, group: str, cluster: str, n: int, points: Sequence[str], root: str,
               remote: Optional[Dict[str, Any]], packs: Optional[Sequence[Sequence[str]]] = None) -> Dict[str, Any]:
    """Submission ``n`` of ``group`` about to be made, added to ``state.intents`` (the caller
    saves the state before it runs sbatch). ``packs``: the points cut into packs (task ``i``
    runs pack ``i``); None: task ``i`` runs point ``i``."""
    intent = {"token": secrets.token_hex(8), "group": group, "cluster": cluster,
              "n": n, "points": list(points), "root": root, "remote": remote,
              "submitted": _dt.datetime.now().isoformat(timespec="seconds")}
    if packs is not None:
        intent["packs"] = [list(p) for p in packs]
    state.intents.append(intent)
    return intent


def comment(intent: Dict[str, Any]) -> str:
    return f"{COMMENT_PREFIX}{intent['token']}"


def comment_option(intent: Dict[str, Any]) -> str:
    """The sbatch option that marks the array as this intent's."""
    return f"--comment={comment(intent)}"


def find_submitted(host: Host, intents: Sequence[Dict[str, Any]]) -> Dict[str, str]:
    """``{token: job id}`` of the ``intents`` whose array slurmctld knows on ``host`` (one squeue)."""
    seen = squeue_comments(COMMENT_PREFIX, host=host)
    return {i["token"]: seen[comment(i)] for i in intents if comment(i) in seen}


def reconcile(state: CampaignState) -> List[Tuple[Dict[str, Any], Optional[str]]]:
    """Settle every intent in ``state`` (in memory; the caller saves): adopted as its array
    when slurmctld knows it, else dropped. Returns ``(intent, job id or None)`` for each."""
    by_host: Dict[Any, List[Dict[str, Any]]] = {}
    for intent in state.intents:
        remote = intent.get("remote") or {}
        by_host.setdefault((remote.get("host"), remote.get("port")), []).append(intent)
    out: List[Tuple[Dict[str, Any], Optional[str]]] = []
    for intents in by_host.values():
        found = find_submitted(array_host(intents[0]), intents)
        for intent in intents:
            job_id = found.get(intent["token"])
            if job_id is None:
                state.intents.remove(intent)
            else:
                state.record_array(intent, job_id)
            out.append((intent, job_id))
    return out
