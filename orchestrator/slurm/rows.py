"""What Slurm says about many jobs, as one :class:`SlurmRow` per job id: one ``squeue`` call
for every job slurmctld still knows, one ``sacct`` call for those it has forgotten."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Dict, List, Optional, Sequence, Tuple

from sporch.orchestrator.host import LOCAL, Host
from sporch.orchestrator.slurm.query import sacct_states, squeue_states
from sporch.orchestrator.slurm.states import TERMINAL_STATES, JobState


@dataclass
class SlurmRow:
    state: str
    reason: Optional[str] = None
    exit_code: Optional[str] = None
    elapsed: Optional[str] = None
    nodelist: Optional[str] = None


def is_terminal(state: str) -> bool:
    return state in TERMINAL_STATES


def _row(st: JobState) -> SlurmRow:
    return SlurmRow(st.name, st.reason, str(st.exit_code) if st.exit_code else None, st.elapsed, st.nodelist)


def squeue_rows(ids: Sequence[str], host: Host = LOCAL, array: bool = False) -> Dict[str, SlurmRow]:
    """State of every job slurmctld still knows, in one squeue call (``array``: one row per
    array task, ``"123_4"``)."""
    return {i: _row(st) for i, st in squeue_states(list(ids), host=host, array=array).items()} if ids else {}


def sacct_rows(ids: Sequence[str], host: Host = LOCAL) -> Optional[Dict[str, SlurmRow]]:
    """Final states from accounting, in one sacct call; None when the cluster has none."""
    if not ids:
        return {}
    states = sacct_states(list(ids), host=host)
    return None if states is None else {i: _row(st) for i, st in states.items()}


def slurm_query(ids: List[str], host: Host) -> Tuple[Dict[str, SlurmRow], Dict[str, str], bool]:
    """(rows by Slurm id, source by Slurm id: squeue | sacct, accounting?) from one squeue call
    and, for the jobs squeue no longer shows, one sacct call."""
    if not ids:
        return {}, {}, True
    rows: Dict[str, SlurmRow] = dict(squeue_rows(ids, host))
    sources = {i: "squeue" for i in rows}
    missing = [i for i in ids if i not in rows]
    accounting = True
    if missing:
        acct = sacct_rows(missing, host)
        if acct is None:
            accounting = False
        else:
            for i in missing:
                if i in acct:
                    rows[i] = acct[i]
                    sources[i] = "sacct"
    return rows, sources, accounting
