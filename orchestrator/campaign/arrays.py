"""The job-array script of one resource group (templates/campaign_array.sbatch.j2).

Every point of a group has the same batch header (groups.resource_shape), so one script
serves them all: array task ``i`` reads line ``i + 1`` of a list file (one point directory
per line) and runs ``sporch.runtime.launch`` on that directory's ``plan.json`` with
``SPORCH_JOB_DIR`` set to it. Resubmitting only some points means writing a new list.

Packed (``run.pack``, templates/campaign_pack.sbatch.j2): array task ``i`` reads line ``i + 1``
of the list file, the list file of its pack (``<list>.<i>``, one point directory per line), and
runs ``sporch.runtime.pack`` on it: every point of the pack in one launch.
"""

from __future__ import annotations

import dataclasses
import posixpath
from pathlib import Path
from typing import Optional, Sequence

from sporch.orchestrator.campaign.packs import pack_time
from sporch.orchestrator.contract.exit_codes import EXIT_PACK_FAILED, EXIT_REQUEUED
from sporch.orchestrator.errors import SporchError
from sporch.orchestrator.host import LOCAL, Host
from sporch.orchestrator.slurm.discover import max_array_size
from sporch.orchestrator.submit.render import render_template
from sporch.orchestrator.submit.slurm_job import SlurmJob

TEMPLATE = "campaign_array.sbatch.j2"
#: The script of a packed submission: array task ``i`` runs the points of pack ``i``.
PACK_TEMPLATE = "campaign_pack.sbatch.j2"
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


def render_pack_array(plan, *, campaign: str, group: str, root: str, list_path: str, packs: Sequence[int],
                      throttle: Optional[int] = None, after: Sequence[str] = ()) -> str:
    """The array script of packed points: ``packs`` holds each pack's number of points (task
    ``i`` runs the pack whose list file is line ``i + 1`` of ``list_path``); the time limit is
    the largest pack's points' limits added up."""
    if not packs or min(packs) < 1:
        raise SporchError(f"group {group} has no point to submit")
    if throttle is not None and throttle < 1:
        raise SporchError(f"run.throttle must be >= 1, got {throttle}")
    job = SlurmJob.from_plan(plan, root)
    job = dataclasses.replace(job, time=pack_time(job.time, max(packs)))
    job = job.as_array(f"{campaign}-{group}", len(packs), throttle, batch_logs=f"{root.rstrip('/')}/{ARRAY_LOGS}",
                       after=after)
    return render_template(PACK_TEMPLATE, job=job, campaign=campaign, group=group, count=len(packs),
                           points=sum(packs), largest=max(packs), list_path=list_path, root=root.rstrip('/'), logs=ARRAY_LOGS,
                           exit_pack_failed=EXIT_PACK_FAILED, exit_requeued=EXIT_REQUEUED)


def write_array(cdir, group, point_ids: Sequence[str], submission: int, *, campaign: str,
                throttle: Optional[int] = None, host=None, root: Optional[str] = None,
                after: Sequence[str] = (), packs: Optional[Sequence[Sequence[str]]] = None) -> tuple[Path, Path]:
    """Write the list file and the array script of one submission of ``group``
    (a groups.Group) for ``point_ids`` (a subset of its points, in array-index order).
    Returns (list file, script). The plans must already be in the point dirs (layout.prepare).

    ``host``/``root``: where the campaign directory the job reads lives (default: this
    machine, ``cdir.root``); a login host's copy (campaign run over ssh) is written through
    its Host.

    ``packs``: ``point_ids`` cut into packs (:mod:`.packs`): array task ``i`` runs pack ``i``,
    whose point directories are listed in ``<list file>.<i>`` (the list file names those).
    """
    host = host or LOCAL
    by_id = {p.id: p for p in group.points}
    missing = [pid for pid in point_ids if pid not in by_id]
    if missing:
        raise SporchError(f"points {', '.join(missing)} are not in group {group.key}")
    root = root or str(cdir.root.resolve())
    list_rel, script_rel = (p.relative_to(cdir.root) for p in cdir.array_files(group.key, submission))
    list_path, script_path = posixpath.join(root, str(list_rel)), posixpath.join(root, str(script_rel))
    def folder(pid: str) -> str:
        return posixpath.join(root, str(cdir.point_dir(pid).relative_to(cdir.root)))

    host.makedirs(posixpath.join(root, ARRAY_LOGS))
    if packs is None:
        lines = [folder(pid) for pid in point_ids]
        script = render_array(by_id[point_ids[0]].plan, campaign=campaign, group=group.key, root=root,
                              list_path=list_path, count=len(point_ids), throttle=throttle, after=after)
    else:
        if [pid for pack in packs for pid in pack] != list(point_ids):
            raise SporchError(f"the packs of group {group.key} do not hold its points in order")
        lines = [f"{list_path}.{i}" for i in range(len(packs))]
        for line, pack in zip(lines, packs):
            host.write_text(line, "".join(f"{folder(pid)}\n" for pid in pack))
        script = render_pack_array(by_id[point_ids[0]].plan, campaign=campaign, group=group.key, root=root,
                                   list_path=list_path, packs=[len(p) for p in packs], throttle=throttle,
                                   after=after)
    host.write_text(list_path, "".join(f"{line}\n" for line in lines))
    host.write_text(script_path, script)
    return Path(list_path), Path(script_path)
