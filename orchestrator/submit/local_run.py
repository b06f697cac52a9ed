"""Run a Plan on this machine: one CPU process per rank, emulating the cluster's nodes.

Each rank is ``python -m sporch.runtime.launch --plan plan.json`` with the Slurm variables a real
srun would set (``SLURM_PROCID``, ``SLURM_LOCALID``, ``SLURM_NODEID``, ``SLURM_NTASKS``...),
so the same Plan, groups and entry point run here as on the cluster. Like
``srun --kill-on-bad-exit``, the first rank that exits non-zero ends the others. Like Slurm,
the job's time limit (``resources.time``, the plan's ``job.time``) is enforced: at the limit
every rank gets SIGTERM (it writes its stacks to its log), then SIGKILL
:data:`LIMIT_KILL_WAIT_S` later, and the run ends as TIMEOUT. A collective that hung ends the
run sooner (the ranks' watchdog, :mod:`sporch.runtime.watchdog`): the cause named is the rank
that never arrived (:func:`sporch.orchestrator.jobs.diagnosis.hang_diagnosis`).

The process that runs the ranks is the local job's supervisor: its pid is the job id the
record keeps, and it writes ``<job_dir>/local.json`` (:mod:`sporch.orchestrator.jobs.local_state`:
``pid``, then the final ``state`` COMPLETED | FAILED | TIMEOUT | CANCELLED and the ranks' exit codes) so
that ``sporch status/logs/wait/cancel`` work on a local run from any process. SIGTERM
(``sporch cancel``) ends the ranks. The ranks die with the supervisor, even a SIGKILLed one
(PR_SET_PDEATHSIG), and hold the folder's ranks lock (``.ranks.lock``, inherited from it): a new
run in the same folder is refused while any rank of a previous run is alive.
``python -m sporch.orchestrator.submit.local_run PLAN JOB_DIR`` is the detached supervisor the local
backend starts.

Torch-free: only the rank processes import torch.
"""

from __future__ import annotations

import dataclasses
import functools
import json
import os
import signal
import subprocess
import sys
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Optional

from sporch.orchestrator.contract import settings
from sporch.orchestrator.contract.durations import time_seconds
from sporch.orchestrator.contract.job_files import LOG_LAYOUTS, JobFiles
from sporch.orchestrator.hangs import ranks_text
from sporch.orchestrator.errors import SporchError
from sporch.orchestrator.contract.results import JobResult, RankError, ResultFileError, read_result, result_file
from sporch.orchestrator.safe_files import open_append
from sporch.orchestrator.jobs.batchlog import root_death
from sporch.orchestrator.jobs.diagnosis import failure_from_hang, recorded_errors
from sporch.orchestrator.jobs.local_state import hold_ranks_lock, write_state

#: After a rank fails, the others get this long to write their error files before being killed.
KILL_GRACE_S = 10.0
#: At the time limit the ranks get SIGTERM, then SIGKILL this much later (Slurm's KillWait).
LIMIT_KILL_WAIT_S = 5.0


#: prctl(2) option: the signal this process gets when its parent dies.
PR_SET_PDEATHSIG = 1


def die_with_parent(parent: int) -> None:
    """In a rank, before exec: SIGKILL when the supervisor (pid ``parent``) dies, even by
    SIGKILL (Linux only); a parent already gone ends the rank at once."""
    if sys.platform.startswith("linux"):
        import ctypes

        ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, int(signal.SIGKILL), 0, 0, 0)
        if os.getppid() != parent:
            os._exit(1)


class Cancelled(Exception):
    """SIGTERM reached the supervisor (``sporch cancel``)."""


@dataclass
class RankProcess:
    rank: int
    node: int
    popen: subprocess.Popen
    log: Path


@dataclass
class LocalRunResult:
    run_dir: Path
    returncodes: dict[int, int]
    result: JobResult | None
    failed_rank: int | None = None
    logs: dict[int, Path] = field(default_factory=dict)
    #: Ranks that ended on their own with a non-zero exit, in the order they were seen to end:
    #: {rank, node, error} ("rank 1 died: killed by signal 9 (SIGKILL) on local-node0").
    died: list[dict] = field(default_factory=list)
    #: Ranks still running when the runner stopped them, and why ("hung" | "timeout" | "limit").
    stopped: dict[int, str] = field(default_factory=dict)
    #: Why result.json could not be read (one line), when it is there but broken.
    result_error: str | None = None
    #: The job's time limit (Slurm's format), when it ended the run (state TIMEOUT).
    time_limit: str | None = None

    @property
    def timed_out(self) -> bool:
        """The job's time limit ended the run, as Slurm's TIMEOUT."""
        return "limit" in self.stopped.values()

    @property
    def ok(self) -> bool:
        return self.failed_rank is None and all(rc == 0 for rc in self.returncodes.values())

    @property
    def completed(self) -> bool:
        """Every rank exited 0 and result.json says completed."""
        return self.ok and self.result is not None and self.result.completed

    def cause(self) -> RankError | None:
        """The failure as the runner saw it: a hung collective (the rank that never arrived,
        from rank 0's result.json or the watchdog's records), the first rank that died without
        writing its record (a peer's broken connection comes after it), else the time limit, a
        rank that hung or ran out of time; None when the rank files tell the story (or nothing
        failed)."""
        if self.result is not None and self.result.hang:
            return self.result.cause()
        hang = failure_from_hang(str(self.run_dir))
        if hang is not None:
            return hang
        recorded = recorded_errors(str(self.run_dir))
        death = root_death(self.died, recorded)
        if death is not None:
            return death
        if self.timed_out:
            running = [r for r, why in self.stopped.items() if why == "limit"]
            return RankError(None, f"the time limit ({self.time_limit}) was reached: ranks {ranks_text(running)} were "
                             "still running; the runner stopped them (each rank's stacks are at the end of its log)")
        for rank, why in sorted(self.stopped.items()):
            if rank not in recorded:
                what = "did not finish before the timeout" if why == "timeout" else \
                    f"hung: still running {KILL_GRACE_S:g} s after another rank failed"
                return RankError(rank, f"rank {rank} {what}; stopped by the local runner")
        return None


def exit_text(code: int) -> str:
    """A process's exit status in words: "killed by signal 9 (SIGKILL)", "exited with code 1"."""
    if code < 0:
        try:
            name = signal.Signals(-code).name
        except ValueError:
            name = "?"
        return f"killed by signal {-code} ({name})"
    return f"exited with code {code}"


def node_name(cluster: str, node: int) -> str:
    return f"{cluster}-node{node}"


def rank_environment(plan_dict: dict, rank: int, rendezvous: Path, job_id: str, run_dir: Path) -> dict[str, str]:
    """A local rank's environment: this process's, then the plan's cluster env (``plan.cluster.env``:
    the defaults and the descriptor's ``env:``, which the batch script exports on a Slurm cluster,
    so the emulation sees what the ranks there see), then what Slurm and sporch would set."""
    info = plan_dict["ranks"][rank]
    nodes = plan_dict["nodes"]
    cluster = plan_dict["cluster"].get("name", "local")
    env = dict(os.environ)
    env.update({str(k): str(v) for k, v in (plan_dict["cluster"].get("env") or {}).items()})
    env.update(
        SLURM_PROCID=str(rank),
        SLURM_LOCALID=str(info["local_rank"]),
        SLURM_NODEID=str(info["node"]),
        SLURM_NTASKS=str(plan_dict["world_size"]),
        SLURM_NNODES=str(nodes),
        SLURM_JOB_ID=job_id,
        SLURM_JOB_NODELIST=",".join(node_name(cluster, n) for n in range(nodes)),
        MASTER_ADDR="127.0.0.1",
        OMP_NUM_THREADS=env.get("OMP_NUM_THREADS", "1"),
        PYTHONUNBUFFERED="1",
    )
    env.update({settings.INIT_METHOD.name: f"file://{rendezvous}", settings.HOSTNAME.name: node_name(cluster, info["node"]),
                settings.FORCE_CPU.name: "1", settings.JOB_DIR.name: str(run_dir)})
    # Slurm would never hand a task torchrun's variables; make sure stale ones don't win.
    for key in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "GROUP_RANK"):
        env.pop(key, None)
    return env


class LocalRun:
    """The rank processes of one local run: start, watch, signal, wait."""

    def __init__(self, plan_path: Path, run_dir: Path, *, python: str = sys.executable) -> None:
        self.plan_path = Path(plan_path)
        self.run_dir = Path(run_dir)
        self.python = python
        self.plan_dict = json.loads(self.plan_path.read_text(encoding="utf-8"))
        self.world = int(self.plan_dict["world_size"])
        self.procs: list[RankProcess] = []
        self.lock_fd: int | None = None

    def start(self) -> "LocalRun":
        """Start every rank; a SporchError when ranks of a previous run in this folder are alive.
        The ranks inherit the folder's ranks lock and die with this process."""
        files = JobFiles(str(self.run_dir))
        Path(files.logs).mkdir(parents=True, exist_ok=True)
        if self.lock_fd is None:
            self.lock_fd = hold_ranks_lock(str(self.run_dir))
        # A FileStore unique to this start (a rerun in the same folder must not meet the
        # stale file of a killed run).
        rendezvous = self.run_dir / f".rendezvous-{uuid.uuid4().hex[:12]}"
        job_id = f"local{os.getpid()}"
        for rank in range(self.world):
            log = Path(files.path(LOG_LAYOUTS["local"]["rank_out"].format(job_id=job_id, rank=rank)))
            with open_append(log) as fh:
                popen = subprocess.Popen(
                    [self.python, "-m", "sporch.runtime.launch", "--plan", str(self.plan_path)],
                    env=rank_environment(self.plan_dict, rank, rendezvous, job_id, self.run_dir),
                    stdout=fh,
                    stderr=subprocess.STDOUT,
                    start_new_session=True,
                    pass_fds=(self.lock_fd,),
                    preexec_fn=functools.partial(die_with_parent, os.getpid()),
                )
            self.procs.append(RankProcess(rank, self.plan_dict["ranks"][rank]["node"], popen, log))
        return self

    def send_signal(self, sig: int) -> None:
        """Signal every live rank (as Slurm does with --signal / scancel --signal)."""
        for p in self.procs:
            if p.popen.poll() is None:
                p.popen.send_signal(sig)

    def terminate(self, wait_s: float) -> None:
        """SIGTERM every live rank (what Slurm sends at the time limit), SIGKILL those still
        alive ``wait_s`` later."""
        for p in self.procs:
            if p.popen.poll() is None:
                try:
                    os.killpg(p.popen.pid, signal.SIGTERM)
                except ProcessLookupError:
                    pass
        deadline = time.monotonic() + wait_s
        while time.monotonic() < deadline and any(p.popen.poll() is None for p in self.procs):
            time.sleep(0.1)
        self.kill()

    def kill(self) -> None:
        _kill_all(self.procs)
        for p in self.procs:
            p.popen.wait()
        self.release()

    def release(self) -> None:
        """Close this process's hold on the folder's ranks lock (the ranks have ended)."""
        if self.lock_fd is not None:
            os.close(self.lock_fd)
            self.lock_fd = None

    def wait(self, *, timeout_s: float | None = None, time_limit: str | None = None,
             on_tick: Callable[[int, int], None] | None = None) -> LocalRunResult:
        """Wait for every rank; like ``srun --kill-on-bad-exit``, a rank that fails ends the
        others after ``KILL_GRACE_S``; like Slurm, ``time_limit`` (Slurm's format) ends the run
        (SIGTERM, SIGKILL :data:`LIMIT_KILL_WAIT_S` later). ``on_tick(finished, world)`` about 5
        times a second."""
        limit_s = time_seconds(time_limit) if time_limit else None
        failed_rank: int | None = None
        failed_at: float | None = None
        start = time.monotonic()
        died: list[dict] = []
        stopped: dict[int, str] = {}
        try:
            while True:
                codes = {p.rank: p.popen.poll() for p in self.procs}
                finished = sum(rc is not None for rc in codes.values())
                if on_tick:
                    on_tick(finished, self.world)
                for p in self.procs:  # a rank that ended badly on its own, in the order seen
                    rc = codes[p.rank]
                    if rc not in (None, 0) and p.rank not in stopped and all(d["rank"] != p.rank for d in died):
                        died.append({"rank": p.rank, "node": p.node, "returncode": rc, "error":
                                     f"rank {p.rank} died: {exit_text(rc)} on {self._node_name(p.node)}"})
                if finished == self.world:
                    break
                if died and failed_rank is None:
                    failed_rank, failed_at = died[0]["rank"], time.monotonic()
                if failed_at is not None and time.monotonic() - failed_at > KILL_GRACE_S:
                    stopped.update({r: "hung" for r, rc in codes.items() if rc is None})
                    self.kill()
                if limit_s is not None and time.monotonic() - start > limit_s and "limit" not in stopped.values():
                    stopped.update({r: "limit" for r, rc in codes.items() if rc is None and r not in stopped})
                    self.terminate(LIMIT_KILL_WAIT_S)
                    continue
                if timeout_s is not None and time.monotonic() - start > timeout_s:
                    stopped.update({r: "timeout" for r, rc in codes.items() if rc is None and r not in stopped})
                    self.kill()
                    if failed_rank is None:
                        failed_rank = min((r for r, why in stopped.items() if why == "timeout"), default=-1)
                time.sleep(0.2)
        except BaseException:  # KeyboardInterrupt, Cancelled (SIGTERM) or a bug here: no rank outlives us
            self.kill()
            raise
        returncodes = {p.rank: p.popen.wait() for p in self.procs}
        self.release()
        for stale in self.run_dir.glob(".rendezvous-*"):  # left behind by killed ranks
            stale.unlink(missing_ok=True)
        try:
            result, result_error = read_result(self.run_dir), None
        except ResultFileError as exc:
            result, result_error = None, str(exc)
        return LocalRunResult(
            run_dir=self.run_dir,
            returncodes=returncodes,
            result=result,
            result_error=result_error,
            failed_rank=failed_rank,
            logs={p.rank: p.log for p in self.procs},
            died=died,
            stopped=stopped,
            time_limit=time_limit if "limit" in stopped.values() else None,
        )

    def _node_name(self, node: int) -> str:
        return node_name(self.plan_dict["cluster"].get("name", "local"), node)


def _on_sigterm(signum, frame) -> None:  # noqa: ARG001 (signal API)
    raise Cancelled()


def supervise(plan_path: Path, run_dir: Path, *, timeout_s: float | None = None,
              on_tick: Callable[[int, int], None] | None = None) -> Optional[LocalRunResult]:
    """Run every rank as this job's supervisor: ``local.json`` says RUNNING (with this pid),
    then how it ended; SIGTERM cancels. Returns the run's result (None when cancelled)."""
    run = LocalRun(plan_path, run_dir)
    run.lock_fd = hold_ranks_lock(str(run_dir))  # refused before local.json says anything
    write_state(str(run_dir), state="RUNNING")
    previous = signal.signal(signal.SIGTERM, _on_sigterm)
    previous_hup = signal.signal(signal.SIGHUP, _on_sigterm)  # the terminal went away
    try:
        res = run.start().wait(timeout_s=timeout_s, time_limit=(run.plan_dict.get("job") or {}).get("time"),
                               on_tick=on_tick)
    except Cancelled:
        run.kill()  # also when the signal came while the ranks were starting
        write_state(str(run_dir), state="CANCELLED", reason="cancelled by sporch")
        return None
    except BaseException:
        run.kill()
        write_state(str(run_dir), state="FAILED", reason="the supervisor stopped")
        raise
    finally:
        signal.signal(signal.SIGTERM, previous)
        signal.signal(signal.SIGHUP, previous_hup)
    ok = res.completed
    code = next((rc for rc in res.returncodes.values() if rc), 0)
    cause = None if ok else res.cause()
    if cause is not None and res.result_error is None:  # a broken result.json is left as it is
        res.result = _blame(run_dir, res.result, cause)
    if cause is not None:
        res.failed_rank = cause.rank
    reason = cause.error if cause is not None else res.result_error
    write_state(str(run_dir), state="COMPLETED" if ok else "TIMEOUT" if res.timed_out else "FAILED",
                exit_code=f"{code}:0",
                failed_rank=res.failed_rank, reason=reason,
                returncodes={str(k): v for k, v in res.returncodes.items()},
                stopped={str(k): v for k, v in res.stopped.items()})
    return res


def _blame(run_dir: Path, result: Optional[JobResult], cause: RankError) -> JobResult:
    """result.json names ``cause`` (a rank that died or hung without its record) as the failure,
    ahead of the errors the ranks recorded (a peer's broken connection); written when rank 0
    could not write one."""
    result = result or JobResult(status="failed")
    result = dataclasses.replace(result, status="failed", failed_rank=cause.rank, error=cause.error,
                                 errors=[cause] + [e for e in result.errors if e != cause])
    result.write(result_file(run_dir))
    return result


def main(argv: list[str] | None = None) -> int:
    """``python -m sporch.orchestrator.submit.local_run PLAN JOB_DIR``: the detached supervisor."""
    plan_path, job_dir = (sys.argv[1:] if argv is None else argv)[:2]
    try:
        res = supervise(Path(plan_path), Path(job_dir))
    except SporchError as exc:  # ranks of a previous run still alive in job_dir
        print(f"sporch: error: {exc}", file=sys.stderr)
        return 2
    return 0 if res is not None and res.ok else 1


def _kill_all(procs: list[RankProcess]) -> None:
    for p in procs:
        if p.popen.poll() is None:
            try:
                os.killpg(p.popen.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass


if __name__ == "__main__":
    sys.exit(main())
