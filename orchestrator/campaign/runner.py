"""``sporch campaign run``: prepare the campaign directory, submit what is left, wait.

One run of the command:

1. takes the directory's lock (:mod:`.lock`; a second runner is refused);
2. expands the file and prepares the directory (:func:`.folder.prepare`; finished points keep
   their files), and settles the submissions an earlier run made without recording their job
   id (:mod:`.intents`: one squeue);
3. polls once (:func:`.track.refresh`) and picks the points to submit: never submitted, or
   failed / lost with submissions left (``1 + run.retries`` in all); finished points and points
   still in a queue are never submitted again;
4. submits them: per resource group ONE ``sbatch`` of a job array (``--array=0-K%throttle``;
   with ``run.pack``, the default, one task per pack of points, :mod:`.packs`) on the group's host (this machine, or the cluster's login host over ssh, where the point
   files are mirrored under ``<login.workdir>/<output_dir>/<name>``); with ``run.serial`` each
   array waits for the cluster's arrays still out (``--dependency=afterany``); or, with
   ``--local``, runs them one after another as local CPU runs
   (:func:`sporch.orchestrator.submit.local_run.supervise`);
5. unless detached, polls until no point is in a queue any more (one squeue per poll).

Every call to Slurm or to a login host that cannot reach it (slurmctld restarting, sshd
dropped) is tried again for ``grace_s`` seconds (:func:`sporch.orchestrator.jobs.retry.retry_unreachable`)
before the run gives up with exit 75; a submission retried so is first looked for in the queue,
so it is never made twice.

Failed points are resubmitted by the next run of the command, not by this one: every run
submits each group at most once.
"""

from __future__ import annotations

import posixpath
import time
from dataclasses import dataclass, field
from typing import Callable, List, Optional, Sequence, TypeVar

from sporch.orchestrator.campaign.arrays import array_limit, split_for_arrays, write_array
from sporch.orchestrator.campaign.expand import expand
from sporch.orchestrator.campaign.folder import PLAN_FILE, POINT_FILE, CampaignDir, prepare
from sporch.orchestrator.campaign.groups import Group, group_points
from sporch.orchestrator.campaign.intents import comment_option, find_submitted, new_intent, reconcile
from sporch.orchestrator.campaign.lock import CampaignLock
from sporch.orchestrator.campaign.packs import make_packs, pack_limit
from sporch.orchestrator.campaign.spec import Campaign, load_campaign
from sporch.orchestrator.campaign.track import LOCAL_TASK, CampaignState, Snapshot, local_failure, refresh
from sporch.orchestrator.contract.durations import time_to_minutes
from sporch.orchestrator.errors import SporchError, Unreachable
from sporch.orchestrator.host import Host, host_for
from sporch.orchestrator.jobs.retry import DEFAULT_GRACE_S, retry_unreachable
from sporch.orchestrator.remote.login import login_dict
from sporch.orchestrator.slurm.commands import sbatch
from sporch.orchestrator.slurm.discover import partition_max_time
from sporch.orchestrator.submit.local_run import supervise

#: Seconds between polls while waiting.
DEFAULT_INTERVAL = 5.0

T = TypeVar("T")


@dataclass
class Submission:
    group: str
    job_id: str  # Slurm array id, or "local"
    points: List[str]
    where: str


@dataclass
class Session:
    """A campaign directory held by this runner (lock taken, prepared)."""

    campaign: Campaign
    groups: List[Group]
    cdir: CampaignDir
    state: CampaignState
    lock: CampaignLock
    submitted: List[Submission] = field(default_factory=list)
    #: Seconds to retry calls that cannot reach Slurm or a login host; ``on_retry(error, pause,
    #: grace left)`` is told before each pause.
    grace_s: float = DEFAULT_GRACE_S
    on_retry: Optional[Callable[[Unreachable, float, float], None]] = None

    @property
    def point_ids(self) -> List[str]:
        return [p.id for g in self.groups for p in g.points]

    @property
    def max_submissions(self) -> int:
        return 1 + self.campaign.spec.run.retries

    def retried(self, fn: Callable[[], T]) -> T:
        """``fn()``, tried again while Slurm or a login host cannot be reached (``grace_s``)."""
        return retry_unreachable(fn, grace_s=self.grace_s, on_retry=self.on_retry)

    def poll(self, local_runner_alive: bool = False) -> Snapshot:
        snap = self.retried(lambda: refresh(self.cdir, self.state, self.point_ids,
                                            local_runner_alive=local_runner_alive))
        self.state.save(self.cdir)
        return snap

    def settle_intents(self) -> list:
        """Adopt or drop the submissions an earlier run left unrecorded (:mod:`.intents`); saved."""
        if not self.state.intents:
            return []
        settled = self.retried(lambda: reconcile(self.state))
        self.state.save(self.cdir)
        return settled

    def todo(self, snap: Snapshot) -> List[str]:
        """Points to submit now: never submitted, or failed with submissions left."""
        out = []
        for pid, cat in snap.categories.items():
            n = self.state.submissions(pid)
            if (cat == "pending" and n == 0) or (cat == "failed" and n < self.max_submissions):
                out.append(pid)
        return out

    def release(self) -> None:
        self.lock.release()


def open_session(campaign_file: str, command: Sequence[str] = (), *, grace_s: float = DEFAULT_GRACE_S,
                 on_retry: Optional[Callable[[Unreachable, float, float], None]] = None) -> Session:
    """Load and expand the file, lock its directory, prepare it (in that order: nothing is
    written into a directory another runner holds), settle an earlier run's unrecorded
    submissions."""
    campaign = load_campaign(campaign_file)
    expansion = expand(campaign)
    if not expansion.points:
        raise SporchError(f"{campaign_file}: the campaign has no point to run ({len(expansion.skipped)} skipped; "
                          "see `sporch campaign plan`)")
    cdir = CampaignDir(campaign.directory().resolve())  # ranks and array tasks need absolute paths
    cdir.root.mkdir(parents=True, exist_ok=True)
    lock = CampaignLock(cdir.lock, command).acquire()
    try:
        prepare(expansion, cdir.root)
        session = Session(campaign, group_points(expansion.points), cdir, CampaignState.load(cdir), lock,
                          grace_s=grace_s, on_retry=on_retry)
        session.settle_intents()
        return session
    except BaseException:
        lock.release()
        raise


# -- Slurm: one job array per group ---------------------------------------------------------------
def group_host(group) -> Host:
    return host_for(group.points[0].plan.cluster.login)


def remote_root(campaign, login, host: Host) -> str:
    """The campaign directory's copy on a login host: ``<workdir>/<output_dir>/<name>``."""
    out = campaign.spec.output_dir
    if not out.startswith(("/", "~")):
        out = posixpath.join(login.workdir, out)
    return host.abspath(posixpath.join(out, campaign.name))


def submit_arrays(session: Session, ids: Sequence[str]) -> List[Submission]:
    """ONE sbatch per group that has points in ``ids`` (one per slice of at most the cluster's
    MaxArraySize points); the state is saved after each."""
    wanted = set(ids)
    out: List[Submission] = []
    c = session.campaign
    for group in session.groups:
        pids = [p.id for p in group.points if p.id in wanted]
        if not pids:
            continue
        host = group_host(group)
        prev: List[str] = []
        limit = session.retried(lambda: array_limit(group.points[0].plan.cluster, host))
        run = c.spec.run
        # packed: one array task per pack (run.pack); else one per point
        packs: List[List[str]] = []
        if run.pack:
            part = group.points[0].plan.cluster.slurm.partition
            most = pack_limit(run.pack_time, session.retried(lambda: partition_max_time(part, host=host)))
            packs = make_packs(pids, run.pack_size, point_time=group.shape["time"], max_time=most)
        slices = ([[pid for pack in part for pid in pack], part] for part in split_for_arrays(packs, limit)) if run.pack else (
            [part, None] for part in split_for_arrays(pids, limit))
        for part, packs in slices:
            out.append(_submit_array(session, group, part, host, prev, packs))
            # run.throttle holds across a group's slices: the next starts once this one has ended
            prev = [out[-1].job_id] if c.spec.run.throttle else []
    return out


def _submit_array(session: Session, group: Group, pids: List[str], host: Host, prev: List[str],
                  packs: Optional[List[List[str]]] = None) -> Submission:
    """One job array of ``group`` for ``pids`` (after the arrays ``prev``), one task per point,
    or one per pack of ``packs``.

    The submission is saved as an intent before sbatch runs and as the array after it answers
    (:mod:`.intents`); an sbatch that could not reach Slurm is retried for the grace period, each
    retry first asking the queue whether the previous try got through after all."""
    c, cdir, state = session.campaign, session.cdir, session.state
    login = group.points[0].plan.cluster.login
    root = remote_root(c, login, host) if host.remote else str(cdir.root.resolve())
    if host.remote:
        session.retried(lambda: mirror_points(cdir, pids, host, root))
    cluster = group.points[0].plan.cluster.name
    after = arrays_out(state, cluster) if c.spec.run.serial else []
    after += [j for j in prev if j not in after]
    n = state.next_submission(group.key)
    _, script = session.retried(lambda: write_array(cdir, group, pids, n, campaign=c.name,
                                                    throttle=c.spec.run.throttle, host=host, root=root, after=after,
                                                    packs=packs))
    intent = new_intent(state, group=group.key, cluster=cluster, n=n, points=pids, root=root,
                        remote=login_dict(login) if host.remote else None, packs=packs)
    state.save(cdir)
    tried = False

    def submit() -> str:
        nonlocal tried
        if tried:  # an earlier try may have been accepted though its answer was lost
            found = find_submitted(host, [intent]).get(intent["token"])
            if found:
                return found
        tried = True
        return sbatch([comment_option(intent)], script=str(script), cwd=root if host.remote else None, host=host)

    try:
        job_id = session.retried(submit)
    except Unreachable:
        raise  # may have been accepted: the intent stays, the next run settles it
    except SporchError:
        state.intents.remove(intent)  # Slurm said no: nothing was submitted
        state.save(cdir)
        raise
    state.record_array(intent, job_id)
    state.save(cdir)
    sub = Submission(group.key, job_id, pids, host.where)
    session.submitted.append(sub)
    return sub


def arrays_out(state: CampaignState, cluster: str) -> List[str]:
    """The job ids of ``cluster``'s arrays that still hold a point not ended (as of the last
    poll): what a new array of a serial campaign waits for."""
    out = []
    for a in state.arrays:
        if a.get("cluster") != cluster:
            continue
        prefix = f"{a['job_id']}_"
        recs = [state.points.get(pid) or {} for pid in a["points"]]
        if any(not r.get("final") and str(r.get("task") or "").startswith(prefix) for r in recs):
            out.append(str(a["job_id"]))
    return out


def mirror_points(cdir, pids: Sequence[str], host: Host, root: str) -> None:
    """Copy the points' point.json and plan.json to the login host's campaign directory."""
    for pid in pids:
        folder = posixpath.join(root, "points", pid)
        host.makedirs(folder)
        for name in (POINT_FILE, PLAN_FILE):
            host.write_text(posixpath.join(folder, name), (cdir.point_dir(pid) / name).read_text(encoding="utf-8"))


def wait(session: Session, *, interval: float = DEFAULT_INTERVAL,
         on_poll: Optional[Callable[[Snapshot], None]] = None, snap: Optional[Snapshot] = None) -> Snapshot:
    """Poll until no point is in a queue."""
    snap = snap or session.poll()
    if on_poll:
        on_poll(snap)
    while snap.active:
        time.sleep(interval)
        snap = session.poll()
        if on_poll:
            on_poll(snap)
    return snap


# -- --local: one point after another on this machine ---------------------------------------------
def run_local_points(session: Session, ids: Sequence[str], *,
                     on_point: Optional[Callable[[str, Optional[str]], None]] = None,
                     on_tick: Optional[Callable[[int, int], None]] = None) -> bool:
    """Run ``ids`` here, in matrix order, each under the local supervisor (ranks as CPU
    processes, emulated nodes), each limited to its time limit as Slurm would.
    ``on_point(pid, None)`` before a point, ``on_point(pid, outcome)`` after it. Returns False
    when SIGTERM cancelled a point (the points after it are left for the next run)."""
    cdir, state = session.cdir, session.state
    wanted = set(ids)
    for group in session.groups:
        for p in group.points:
            if p.id not in wanted:
                continue
            state.started(p.id, LOCAL_TASK)
            state.point(p.id)["state"] = "RUNNING"
            state.save(cdir)
            if on_point:
                on_point(p.id, None)
            limit = 60.0 * time_to_minutes(p.plan.job.time or p.plan.cluster.slurm.time)
            res = supervise(cdir.plan_file(p.id), cdir.point_dir(p.id), timeout_s=limit, on_tick=on_tick)
            ok = res is not None and res.completed
            if ok:
                state.ended(p.id, "COMPLETED")
            else:
                state.ended(p.id, "CANCELLED" if res is None else "FAILED",
                            local_failure(cdir, p.id) or ("cancelled" if res is None else "failed without a result"))
            state.save(cdir)
            if on_point:
                on_point(p.id, state.point(p.id)["state"])
            if res is None:  # SIGTERM: the campaign run stops (the next run retries this point)
                return False
    return True
