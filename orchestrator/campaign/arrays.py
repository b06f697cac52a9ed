"""The job-array script of one resource group (templates/campaign_array.sbatch.j2).

Every point of a group has the same batch header (groups.resource_shape), so one script
serves them all: array task ``i`` reads line ``i + 1`` of a list file (one point directory
per line) and runs ``sporch.runtime.launch`` on that directory's ``plan.json`` with
``SPORCH_JOB_DIR`` set to it. Resubmitting only some points means writing a new list.
"""

from __future__ import annotations

import posixpath
from pathlib import Path
from typing import Optional, Sequence

from sporch.orchestrator.errors import SporchError
from sporch.orchestrator.host import LOCAL, Host
from sporch.orchestrator.slurm.discover import max_array_size
from sporch.orchestrator.submit.render import render_template
from sporch.orchestrator.submit.slurm_job import SlurmJob

TEMPLATE = "campaign_array.sbatch.j2"
#: Batch logs of the array tasks, relative to the campaign directory.
ARRAY_LOGS = "arrays/logs"


def array_limit(cluster, host: Host = LOCAL) -> int:
    """The most points one array of ``cluster`` may hold: the descriptor's ``slurm.max_array_size``,
    else Slurm's MaxArraySize (``scontrol show config`` on ``host``)."""
    limit = cluster.slurm.max_array_size or max_array_size(host=host)
    if limit < 1:
        raise SporchError(f"cluster {cluster.name} allows no job arrays (MaxArraySize {limit}); "
                          "a campaign needs them")
    return limit


def split_for_arrays(point_ids: Sequence[str], limit: int) -> list[list[str]]:
    """``point_ids`` in consecutive slices of at most ``limit``: one job array each (Slurm
    rejects ``--array`` indices at or above MaxArraySize)."""
    ids = list(point_ids)
    return [ids[i:i + limit] for i in range(0, len(ids), limit)]


def render_array(plan, *, campaign: str, group: str, root: str, list_path: str, count: int,
                 throttle: Optional[int] = None, after: Sequence[str] = ()) -> str:
    """The array script for ``count`` points listed in ``list_path``.

    ``plan``: any point's Plan of the group (the header comes from it); ``root``: the
    campaign directory (batch logs go to ``<root>/arrays/logs``); ``after``: job ids the array
    waits for (``run.serial``).
    """
    if count < 1:
        raise SporchError(f"group {group} has no point to submit")
    if throttle is not None and throttle < 1:
        raise SporchError(f"run.throttle must be >= 1, got {throttle}")
    job = SlurmJob.from_plan(plan, root).as_array(f"{campaign}-{group}", count, throttle,
                                                  batch_logs=f"{root.rstrip('/')}/{ARRAY_LOGS}", after=after)
    return render_template(TEMPLATE, job=job, campaign=campaign, group=group, count=count, list_path=list_path)


def write_array(cdir, group, point_ids: Sequence[str], submission: int, *, campaign: str,
                throttle: Optional[int] = None, host=None, root: Optional[str] = None,
                after: Sequence[str] = ()) -> tuple[Path, Path]:
    """Write the list file and the array script of one submission of ``group``
    (a groups.Group) for ``point_ids`` (a subset of its points, in array-index order).
    Returns (list file, script). The plans must already be in the point dirs (layout.prepare).

    ``host``/``root``: where the campaign directory the job reads lives (default: this
    machine, ``cdir.root``); a login host's copy (campaign run over ssh) is written through
    its Host.
    """
    host = host or LOCAL
    by_id = {p.id: p for p in group.points}
    missing = [pid for pid in point_ids if pid not in by_id]
    if missing:
        raise SporchError(f"points {', '.join(missing)} are not in group {group.key}")
    root = root or str(cdir.root.resolve())
    list_rel, script_rel = (p.relative_to(cdir.root) for p in cdir.array_files(group.key, submission))
    list_path, script_path = posixpath.join(root, str(list_rel)), posixpath.join(root, str(script_rel))
    lines = [posixpath.join(root, str(cdir.point_dir(pid).relative_to(cdir.root))) for pid in point_ids]
    script = render_array(by_id[point_ids[0]].plan, campaign=campaign, group=group.key, root=root,
                          list_path=list_path, count=len(point_ids), throttle=throttle, after=after)
    host.makedirs(posixpath.join(root, ARRAY_LOGS))
    host.write_text(list_path, "".join(f"{line}\n" for line in lines))
    host.write_text(script_path, script)
    return Path(list_path), Path(script_path)
