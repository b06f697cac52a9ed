"""Where each point of a campaign stands: ``state.json`` and one poll of the scheduler.

``state.json`` keeps every submission (a Slurm job array, or a local run) and, per point, how
many times it was submitted, its current task (``<array>_<index>`` or ``local``), its last known
state and, once it failed, the error line. ``result.json`` stays the truth for success: a point
whose result says ``completed`` is done whatever the queue says.

A poll (:func:`refresh`) asks each host once: ONE ``squeue --array`` for every array with a
task still out, then ONE ``sacct`` for the tasks squeue no longer shows (a task known to
neither, without a completed result, is *lost*). Results of points that ran on a login host
(over ssh) are copied into the local campaign directory, so the report reads local files.

Point categories (what progress and ``campaign status`` count): ``pending`` (not submitted
yet, or waiting in the queue), ``running``, ``done``, ``failed`` (ended without a completed
result: failed, cancelled, timed out, lost).
"""

from __future__ import annotations

import json
import posixpath
from dataclasses import dataclass, field
from typing import Any, Dict, List, Optional

from sporch.orchestrator.contract.results import JobResult, ResultFileError, read_bounded_text, write_json_atomic
from sporch.orchestrator.errors import SporchError
from sporch.orchestrator.host import LOCAL, Host, host_for
from sporch.orchestrator.jobs.diagnosis import job_dir_failure, one_line
from sporch.orchestrator.slurm.rows import sacct_rows, squeue_rows
from sporch.orchestrator.slurm.states import parse_state

CATEGORIES = ("pending", "running", "done", "failed")
#: ``task`` of a point run on this machine (campaign run --local).
LOCAL_TASK = "local"
SCHEMA = 1


@dataclass
class CampaignState:
    """The runner's memory (``state.json``)."""

    arrays: List[Dict[str, Any]] = field(default_factory=list)  # job_id, group, cluster, n, points, root, remote, submitted
    points: Dict[str, Dict[str, Any]] = field(default_factory=dict)  # id -> submissions, task, state, final, error
    #: Submissions asked of sbatch whose job id is not recorded yet (:mod:`.intents`): an array
    #: record without ``job_id`` plus the ``token`` its ``--comment`` carries.
    intents: List[Dict[str, Any]] = field(default_factory=list)

    @classmethod
    def load(cls, cdir) -> "CampaignState":
        """The state of ``cdir`` (empty without a state.json); a file that is not the runner's
        state is a one-line SporchError naming it."""
        path = cdir.state
        try:
            data = json.loads(read_bounded_text(path))
        except FileNotFoundError:
            return cls()
        except ValueError as exc:  # ResultFileError, JSONDecodeError
            raise _bad_state(path, exc if isinstance(exc, ResultFileError) else f"not valid JSON ({exc})")
        if not isinstance(data, dict):
            raise _bad_state(path, f"expected a JSON object, got {type(data).__name__}")
        arrays = [] if data.get("arrays") is None else data["arrays"]
        points = {} if data.get("points") is None else data["points"]
        intents = [] if data.get("intents") is None else data["intents"]
        if not isinstance(arrays, list) or not all(isinstance(a, dict) and all(
                isinstance(a.get(k), str) for k in ("job_id", "group", "root")) for a in arrays):
            raise _bad_state(path, "'arrays' must be a list of objects with job_id, group and root")
        if not isinstance(intents, list) or not all(isinstance(a, dict) and all(
                isinstance(a.get(k), str) for k in ("token", "group", "root")) and isinstance(a.get("points"), list)
                and all(isinstance(p, str) for p in a["points"]) for a in intents):
            raise _bad_state(path, "'intents' must be a list of objects with token, group, root and points")
        for a in arrays + intents:
            packs = a.get("packs")
            if packs is not None and not (isinstance(packs, list) and all(
                    isinstance(p, list) and p and all(isinstance(x, str) for x in p) for p in packs)):
                raise _bad_state(path, "'packs' of a submission must be a list of lists of point ids")
        if not isinstance(points, dict) or not all(isinstance(v, dict) for v in points.values()):
            raise _bad_state(path, "'points' must map point ids to objects")
        for pid, rec in points.items():
            sub, task = rec.get("submissions"), rec.get("task")
            if sub is not None and (isinstance(sub, bool) or not isinstance(sub, int)):
                raise _bad_state(path, f"point {pid}: submissions must be an integer, got {sub!r}")
            if task is not None and not isinstance(task, str):
                raise _bad_state(path, f"point {pid}: task must be text, got {task!r}")
        return cls(arrays=list(arrays), points=dict(points), intents=list(intents))

    def save(self, cdir) -> None:
        write_json_atomic(cdir.state, {"schema": SCHEMA, "arrays": self.arrays, "points": self.points,
                                       "intents": self.intents})

    def point(self, pid: str) -> Dict[str, Any]:
        return self.points.setdefault(pid, {"submissions": 0, "task": None, "state": None, "final": False,
                                            "error": None})

    def submissions(self, pid: str) -> int:
        return int((self.points.get(pid) or {}).get("submissions") or 0)

    def array(self, job_id: str) -> Optional[Dict[str, Any]]:
        return next((a for a in self.arrays if a["job_id"] == job_id), None)

    def next_submission(self, group: str) -> int:
        """The number of the group's next submission (its list and script file names): one past
        every array and every unresolved intent of the group."""
        same = [a for a in self.arrays + self.intents if a["group"] == group]
        numbers = [a["n"] for a in same if isinstance(a.get("n"), int) and not isinstance(a["n"], bool)]
        return 1 + max([len(same), *numbers])

    def record_array(self, intent: Dict[str, Any], job_id: str) -> Dict[str, Any]:
        """``intent`` became Slurm array ``job_id``: it leaves the intents, joins the arrays, and
        its points' tasks are ``<job_id>_<index>`` in list order (packed: the index of the
        point's pack)."""
        if intent in self.intents:
            self.intents.remove(intent)
        array = {k: v for k, v in intent.items() if k != "token"}
        array["job_id"] = job_id
        self.arrays.append(array)
        packs = intent.get("packs") or [[pid] for pid in intent["points"]]
        for i, pack in enumerate(packs):
            for pid in pack:
                self.started(pid, f"{job_id}_{i}")
        return array

    def started(self, pid: str, task: str) -> None:
        rec = self.point(pid)
        rec.update(submissions=self.submissions(pid) + 1, task=task, state="PENDING", final=False, error=None)

    def ended(self, pid: str, state: str, error: Optional[str] = None) -> None:
        self.point(pid).update(state=state, final=True, error=error)


def _bad_state(path, why) -> SporchError:
    if isinstance(why, ResultFileError):
        why = str(why).removeprefix(f"{path}: ")
    return SporchError(f"{path}: {why}; move it away and run the campaign again (points with a completed "
                       "result stay done; sporch forgets the job arrays the file listed)")


def category(rec: Optional[Dict[str, Any]], done: bool) -> str:
    if done:
        return "done"
    if not rec or not rec.get("submissions"):
        return "pending"
    if rec.get("final"):
        return "failed"
    return "running" if rec.get("state") in ("RUNNING", "COMPLETING") else "pending"


def result_status(text: Optional[str]) -> Optional[str]:
    """A result.json's status; None when there is none or it is broken (the point is not done:
    its failure line says why)."""
    try:
        return JobResult.from_json(text).status if text else None
    except ResultFileError:
        return None


def is_done(cdir, pid: str) -> bool:
    """Whether the point's local result.json says completed (a broken one, a FIFO or a device
    in its place: not done, and never a hang)."""
    try:
        return JobResult.load(cdir.result_file(pid)).status == "completed"
    except (FileNotFoundError, ResultFileError):
        return False


@dataclass
class Snapshot:
    """One poll's answer: each point's category (and the state record it came from)."""

    categories: Dict[str, str]
    state: CampaignState

    def counts(self) -> Dict[str, int]:
        out = {c: 0 for c in CATEGORIES}
        for c in self.categories.values():
            out[c] += 1
        return out

    def ids(self, cat: str) -> List[str]:
        return [pid for pid, c in self.categories.items() if c == cat]

    @property
    def active(self) -> bool:
        """Some point is still out (in a queue): waiting makes sense."""
        return any(self.state.point(pid).get("submissions") and c in ("pending", "running")
                   for pid, c in self.categories.items())

    def text(self) -> str:
        return ", ".join(f"{n} {c}" for c, n in self.counts().items())


def array_host(array: Dict[str, Any]) -> Host:
    return host_for(array.get("remote"))


def point_dir_on(array: Dict[str, Any], pid: str) -> str:
    return posixpath.join(array["root"], "points", pid)


def refresh(cdir, state: CampaignState, point_ids: List[str], *, local_runner_alive: bool = False) -> Snapshot:
    """Poll once and update ``state`` in memory (the caller saves it when it holds the lock).

    ``local_runner_alive``: a local run in this process is in progress (its point is running,
    not lost)."""
    cats: Dict[str, str] = {}
    out: Dict[str, List[tuple]] = {}  # host key -> [(pid, array, task)]
    hosts: Dict[Any, Host] = {}
    for pid in point_ids:
        rec = state.points.get(pid)
        if is_done(cdir, pid):
            if rec and not (rec.get("final") and rec.get("state") == "COMPLETED"):
                state.ended(pid, "COMPLETED")
            cats[pid] = "done"
            continue
        if rec and rec.get("submissions") and not rec.get("final"):
            task = rec.get("task") or ""
            if task == LOCAL_TASK:
                if not local_runner_alive:  # the lock says no other runner: that run is gone
                    state.ended(pid, "LOST", local_failure(cdir, pid) or "lost: the local run was interrupted")
            else:
                array = state.array(task.split("_")[0])
                if array is None:
                    state.ended(pid, "LOST", "lost: its job array is not in state.json")
                else:
                    host = array_host(array)
                    key = (array.get("remote") or {}).get("host"), (array.get("remote") or {}).get("port")
                    hosts[key] = host
                    out.setdefault(key, []).append((pid, array, task))
        cats[pid] = category(state.points.get(pid), False)

    for key, items in out.items():
        host = hosts[key]
        rows = squeue_rows(sorted({a["job_id"] for _, a, _ in items}), host, array=True)
        done = {pid: _fetch_done(cdir, host, a, pid) for pid, a, _ in items}
        unknown = sorted({t.split("_")[0] for pid, _, t in items if t not in rows and not done[pid]})
        acct = sacct_rows(unknown, host) if unknown else {}
        for pid, array, task in items:
            row = rows.get(task) or (acct or {}).get(task)
            if done[pid]:
                state.ended(pid, "COMPLETED")
                cats[pid] = "done"
                continue
            if row is not None and not parse_state(row.state).terminal:
                state.point(pid)["state"] = row.state
                cats[pid] = category(state.points[pid], False)
                continue
            if row is None:
                state.ended(pid, "LOST", "lost: left the queue without a result"
                            + ("" if acct is not None else " (no accounting on this cluster)"))
            else:
                state.ended(pid, row.state, slurm_failure(host, array, pid, task, row))
            cats[pid] = "failed"
    return Snapshot(cats, state)


def _fetch_done(cdir, host: Host, array: Dict[str, Any], pid: str) -> bool:
    """Whether the point's result (on its host) says completed; a login host's result is
    copied into the local campaign directory."""
    if is_done(cdir, pid):
        return True
    if not host.remote:
        return False
    text = host.read_text(posixpath.join(point_dir_on(array, pid), "result.json"))
    if result_status(text) != "completed":
        return False
    LOCAL.write_text(str(cdir.result_file(pid)), text)
    return True


def slurm_failure(host: Host, array: Dict[str, Any], pid: str, task: str, row) -> str:
    """``STATE: error line`` of an array task that ended without a completed result."""
    folder = point_dir_on(array, pid)
    state = row.state + (f" ({row.reason})" if row.reason else "")
    job, _, index = task.partition("_")
    logs = posixpath.join(folder, "logs")
    candidates = [posixpath.join(array["root"], "arrays", "logs", f"{job}_{index}.err")]
    candidates += [posixpath.join(logs, n) for n in sorted(host.listdir(logs), reverse=True) if n.endswith(".err")]
    line = job_dir_failure(folder, candidates, host)
    return one_line(f"{state}: {line}" if line else state)


def local_failure(cdir, pid: str) -> Optional[str]:
    """The error line a local run of the point left (result, rank files, rank logs)."""
    logs = cdir.point_dir(pid) / "logs"
    return job_dir_failure(str(cdir.point_dir(pid)), sorted(logs.glob("rank*.log")) if logs.is_dir() else [])
