"""Hung collectives: the timeout, what the runtime's watchdog writes, and how it is read
(standard library only; the runtime writes these files, ``sporch status`` and the local runner
read them).

When a collective has not completed within the collective timeout
(:func:`collective_timeout_s`), every rank's watchdog (:mod:`sporch.runtime.watchdog`) writes
``<job_dir>/hang/rank<N>.txt`` (a header, then the Python stacks of all its threads) and
``<job_dir>/hang/rank<N>.json``, a record with these keys:

``rank``, ``host``, ``node`` (the node index), ``pid``, ``time`` (when written, epoch seconds),
``timeout_s``, ``state`` (``timeout``: this rank waited in ``collective`` longer than the
timeout; ``alerted``: a peer timed out and this rank wrote its stacks too, whether or not it was
in a collective), ``collective`` (the collective it is in, or null), ``last`` (the last one it
finished, or null), ``entered`` (how many collectives it entered), ``at`` (the innermost frame of
its main thread outside torch, ``file.py:123 in function``), ``stack`` (the .txt file's name).

A collective is ``{name, kind, group, ranks, seq, layer, step, started, waited_s}``: ``name``
says what it is for (``ulysses_qkv``, ``ring_kv``, ``gather_records``), ``kind`` which torch
call (``all_to_all``, ``p2p``, ``all_gather``, ``all_reduce``, ``barrier``), ``group`` the
mesh dimension (``ulysses``, ``ring``, ``sequence``, ``cfg``, ``world``), ``ranks`` the group's
global ranks, ``seq`` its number among this rank's collectives on that group (1 = the first),
``layer``/``step`` where in the model and the workload it was issued (null where unknown).

:func:`diagnose` turns the records into one line: which ranks waited in which collective, and
which members of its group never arrived (and where they were instead).
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from typing import Any, Dict, Iterable, List, Mapping, Optional, Tuple

from sporch.orchestrator.contract.numbers import is_digits
from sporch.orchestrator.contract.durations import time_seconds

#: The collective timeout when the job sets none: 5 minutes ...
DEFAULT_COLLECTIVE_TIMEOUT_S = 300.0
#: ... or a quarter of the job's time limit when that is shorter; never more than half of it.
DEFAULT_LIMIT_FRACTION = 0.25
MAX_LIMIT_FRACTION = 0.5
#: The process group's own timeout (gloo, NCCL) is the collective timeout plus this, so that the
#: watchdog, which writes the stacks, fires first.
PG_TIMEOUT_MARGIN_S = 60.0
#: Version of the record's keys.
HANG_SCHEMA_VERSION = 1
#: The states of a record.
STATES = ("timeout", "alerted")


def collective_timeout_s(configured: Optional[float], time_limit: Optional[str]) -> float:
    """The collective timeout of a job: ``configured`` (``resources.collective_timeout``), else
    :data:`DEFAULT_COLLECTIVE_TIMEOUT_S` or a quarter of the time limit when that is less; never
    more than half the time limit (the stacks must be written before Slurm ends the job)."""
    limit = time_seconds(time_limit) if time_limit else None
    if configured is not None and float(configured) > 0:
        timeout = float(configured)
    else:
        timeout = DEFAULT_COLLECTIVE_TIMEOUT_S
        if limit:
            timeout = min(timeout, limit * DEFAULT_LIMIT_FRACTION)
    if limit:
        timeout = min(timeout, limit * MAX_LIMIT_FRACTION)
    return max(1.0, timeout)


def pg_timeout_s(collective_timeout: float) -> int:
    """The process group's timeout for a collective timeout (whole seconds, the watchdog's first)."""
    return int(collective_timeout + PG_TIMEOUT_MARGIN_S + 0.999)


# -- reading ------------------------------------------------------------------------------------
def parse_record(text: str) -> Optional[Dict[str, Any]]:
    """A hang record from its JSON text; None when it is not one (a broken file is left out:
    the other ranks' records still tell)."""
    try:
        data = json.loads(text)
    except ValueError:
        return None
    if not isinstance(data, dict) or not isinstance(data.get("rank"), int) or isinstance(data.get("rank"), bool):
        return None
    if data.get("state") not in STATES:
        return None
    for key in ("collective", "last"):
        value = data.get(key)
        if value is not None and not (isinstance(value, dict) and isinstance(value.get("ranks"), list)
                                      and all(isinstance(r, int) for r in value["ranks"])):
            return None
    return data


def record_names(names: Iterable[str]) -> List[str]:
    """The record files among a hang folder's names (``rank<N>.json``), by rank."""
    found = [n for n in names if n.startswith("rank") and n.endswith(".json") and is_digits(n[4:-5])]
    return sorted(found, key=lambda n: int(n[4:-5]))


# -- telling ------------------------------------------------------------------------------------
@dataclass
class HangDiagnosis:
    """What the hang records say: ``line`` (one line for people), ``failed_rank`` (the first
    rank that never arrived; None when every member entered the collective), ``never_arrived``,
    ``waited`` (the ranks that waited in ``collective``), ``nodes`` (rank -> host of the ranks
    named), ``collective`` (the collective the first rank to time out waited in)."""

    line: str
    failed_rank: Optional[int]
    never_arrived: List[int] = field(default_factory=list)
    waited: List[int] = field(default_factory=list)
    nodes: Dict[str, Optional[str]] = field(default_factory=dict)
    collective: Dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> Dict[str, Any]:
        return asdict(self)


def ranks_text(ranks: Iterable[int]) -> str:
    """``[0, 1, 2, 5]`` -> ``0-2,5``."""
    out: List[str] = []
    rs = sorted(set(ranks))
    i = 0
    while i < len(rs):
        j = i
        while j + 1 < len(rs) and rs[j + 1] == rs[j] + 1:
            j += 1
        out.append(str(rs[i]) if i == j else f"{rs[i]}-{rs[j]}" if j > i + 1 else f"{rs[i]},{rs[j]}")
        i = j + 1
    return ",".join(out)


def collective_text(c: Mapping[str, Any], *, where: bool = True) -> str:
    """``ulysses_qkv (all_to_all, collective #3 of ulysses group [0-3], layer 1, step 2)``;
    without ``where`` just ``ulysses_qkv #3``."""
    if not where:
        return f"{c.get('name')} #{c.get('seq')}"
    group = f"{c.get('group')} group" if c.get("group") else "group"
    inner = [c.get("kind") or "collective",
             f"collective #{c.get('seq')} of {group} [{ranks_text(c.get('ranks') or [])}]"]
    inner += [f"{k} {c[k]}" for k in ("layer", "step") if c.get(k) is not None]
    return f"{c.get('name')} ({', '.join(inner)})"


def _key(c: Mapping[str, Any]) -> Tuple[Tuple[int, ...], Any, Any]:
    """The same collective on every rank of its group: its group, its number there, its name (a
    rank in another collective with the same number is out of step: it is named as such)."""
    return tuple(c.get("ranks") or ()), c.get("seq"), c.get("name")


def _seconds(x: Any) -> str:
    return f"{float(x):.0f} s" if isinstance(x, (int, float)) else "?"


def diagnose(records: Mapping[int, Mapping[str, Any]], hosts: Optional[Mapping[int, Optional[str]]] = None
             ) -> Optional[HangDiagnosis]:
    """The line that names the rank(s) that never arrived, from every hang record found
    (``rank -> record``); ``hosts`` (rank -> node name) fills in the node of a rank that wrote
    none. None when no rank timed out."""
    hosts = dict(hosts or {})
    timed_out = [r for r in records.values() if r.get("state") == "timeout" and r.get("collective")]
    if not timed_out:
        return None
    first = min(timed_out, key=lambda r: (r["collective"].get("started") or 0.0, r["rank"]))
    stuck = first["collective"]
    key = _key(stuck)
    waited = sorted(r["rank"] for r in records.values() if r.get("collective") and _key(r["collective"]) == key)
    members = [int(m) for m in stuck.get("ranks") or []]
    missing = [m for m in members if m not in waited]

    def host(rank: int) -> Optional[str]:
        rec = records.get(rank)
        return (rec.get("host") if rec else None) or hosts.get(rank)

    longest = max((r["collective"].get("waited_s") or 0.0) for r in records.values()
                  if r.get("collective") and _key(r["collective"]) == key)
    what = collective_text(stuck)
    nodes = {str(r): host(r) for r in (missing or waited)}
    if not missing:
        line = (f"{what} did not complete within {_seconds(first.get('timeout_s'))} although ranks "
                f"{ranks_text(waited)} all entered it (a network or NCCL problem?); stacks in hang/")
        return HangDiagnosis(line=line, failed_rank=None, waited=waited, nodes=nodes, collective=dict(stuck))
    names = ", ".join(f"{m} ({host(m) or 'node ?'})" for m in missing[:4]) + (", ..." if len(missing) > 4 else "")
    line = (f"rank{'s' if len(missing) > 1 else ''} {names} never arrived at {what}: "
            f"rank{'s' if len(waited) > 1 else ''} {ranks_text(waited)} waited {_seconds(longest)}")
    for m in missing[:2]:
        line += f"; rank {m} " + _whereabouts(records.get(m))
    line += "; stacks in hang/"
    return HangDiagnosis(line=line, failed_rank=missing[0], never_arrived=missing, waited=waited, nodes=nodes,
                         collective=dict(stuck))


def _whereabouts(rec: Optional[Mapping[str, Any]]) -> str:
    """Where a rank that never arrived was instead, from its own record."""
    if rec is None:
        return "wrote no stack (its watchdog did not answer: stuck outside Python, or gone)"
    at = f" at {rec['at']}" if rec.get("at") else ""
    if rec.get("collective"):
        return f"was in {collective_text(rec['collective'])}{at}"
    last = rec.get("last")
    after = f"after {collective_text(last, where=False)}" if last else "before its first collective"
    return f"was in no collective ({after}){at}"
