"""What a Slurm job's batch log says about how it ended (standard library only).

srun reports each task that ended badly on the batch script's stderr, first the one that ended
first (``srun: error: node2: task 2: Killed``, ``srun: error: node1: tasks 0-1: Terminated``,
``... task 1: Exited with exit code 3``); Slurm's own failures are ``srun: error: ...`` /
``slurmstepd: error: ...`` lines (``Slurmd could not connect IO``).
"""

from __future__ import annotations

import re
import signal
from typing import Dict, List, Optional

from sporch.orchestrator.contract.results import RankError, is_secondary

_TASK_RE = re.compile(r"^srun: error: (\S+): tasks? (\d+)(?:-(\d+))?: (.+?)\s*$")
_SLURM_ERROR_RE = re.compile(r"^(?:srun|slurmstepd(?:-\S+)?|sbatch|salloc)(?:\[\d+\])?: error: (.+?)\s*$")
#: strsignal() text (what srun prints) -> signal number.
_SIGNALS = {signal.strsignal(s): int(s) for s in signal.Signals if signal.strsignal(s)}


def death_text(what: str) -> str:
    """srun's "Killed" -> "killed by signal 9 (SIGKILL)"; other texts lower-cased."""
    if what in _SIGNALS:
        num = _SIGNALS[what]
        return f"killed by signal {num} ({signal.Signals(num).name})"
    return what[:1].lower() + what[1:]


def task_deaths(text: str) -> List[Dict[str, object]]:
    """{rank, node, error} of every task srun reports as ended badly, in the order reported."""
    out: List[Dict[str, object]] = []
    for line in text.splitlines():
        m = _TASK_RE.match(line.strip())
        if not m:
            continue
        node, first, last, what = m.group(1), int(m.group(2)), int(m.group(3) or m.group(2)), m.group(4)
        for rank in range(first, last + 1):
            out.append({"rank": rank, "node": node, "error": f"rank {rank} died: {death_text(what)} on {node}"})
    return out


def root_death(deaths: List[Dict[str, object]], recorded: Dict[int, Optional[str]]) -> Optional[RankError]:
    """Of ``deaths`` (in the order the ranks ended), the first rank that wrote no record of its
    own (``recorded``: rank -> the error its record names, None for none): the root cause, ahead
    of its peers' broken connections. None when a rank that recorded an error of its own (not a
    broken connection) ended first: that error is the cause."""
    for death in deaths:
        rank = death["rank"]
        if rank not in recorded:
            return RankError(rank, str(death["error"]))  # type: ignore[arg-type]
        error = recorded[rank]
        if error and not is_secondary(error):
            return None
    return None


def slurm_error(text: str) -> Optional[str]:
    """The first error Slurm's own tools wrote (not a task's exit report), e.g. "Slurmd could
    not connect IO"; None when there is none."""
    for line in text.splitlines():
        line = line.strip()
        if _TASK_RE.match(line):
            continue
        m = _SLURM_ERROR_RE.match(line)
        if m and not m.group(1).startswith("***"):
            return line
    return None
