"""Progress that survives a requeue.

A workload calls ``progress.step_done(step, state)`` after every finished step; rank 0
persists the state (JSON metadata + optional tensors) atomically under
``<output_dir>/checkpoint/``. A requeued job (``scontrol requeue``, preemption, or our own
USR2 handler near the time limit) starts again, finds the checkpoint and resumes from the
last finished step, never from zero.

USR2 (not USR1: NCCL uses it) only sets a flag; ranks agree on it at the next step
boundary (one tiny all-reduce) so that every rank stops at the same step, and rank 0 then
asks Slurm to requeue the job.

``watchdog`` (a :class:`sporch.runtime.watchdog.thread.Watchdog`, or None) watches those collectives
and learns the step being computed (its records say ``step``).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
from contextlib import nullcontext
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist

from sporch.orchestrator.contract.job_files import PROGRESS_FILE, JobFiles
from sporch.orchestrator.contract.results import write_json_atomic
from sporch.orchestrator.safe_files import create_temp


class RequeueRequested(Exception):
    """Raised at a step boundary after USR2: progress is saved and the job is requeued."""


@dataclass
class Progress:
    output_dir: Path
    rank: int
    group: Any = None  # process group used to agree on a stop; None = default world
    watchdog: Any = None  # sporch.runtime.watchdog.thread.Watchdog over the collectives below, or None
    _stop: bool = field(default=False, init=False)

    @property
    def folder(self) -> Path:
        return Path(JobFiles(str(self.output_dir)).checkpoint)

    # -- signals -------------------------------------------------------------------
    def install_signal_handler(self) -> None:
        signal.signal(signal.SIGUSR2, self._on_usr2)

    def _on_usr2(self, signum, frame) -> None:  # noqa: ARG002 (signal API)
        self._stop = True

    def _collective(self, name: str, kind: str):
        """The watchdog's context manager for one collective over ``group`` (a no-op without one)."""
        if self.watchdog is None:
            return nullcontext()
        ranks = dist.get_process_group_ranks(self.group) if self.group is not None else None
        return self.watchdog.collective(name, ranks, kind=kind)

    @property
    def stop_requested(self) -> bool:
        """Whether this rank got USR2 (not yet agreed with the others)."""
        return self._stop

    def stop_agreed(self) -> bool:
        """True on every rank when any rank got USR2 (one all-reduce of one int)."""
        if not (dist.is_available() and dist.is_initialized()):
            return self._stop
        flag = torch.tensor([1 if self._stop else 0], dtype=torch.int32)
        if dist.get_backend(self.group) == "nccl":
            flag = flag.cuda()
        with self._collective("agree_stop", "all_reduce"):
            dist.all_reduce(flag, op=dist.ReduceOp.MAX, group=self.group)
        return bool(flag.item())

    # -- state -----------------------------------------------------------------------
    def load(self) -> dict[str, Any] | None:
        """The last saved progress (``step`` = finished steps), or None on a first run.

        Collective: a barrier after the read, so that no rank can finish (and rank 0 record)
        step 1 before every rank has read the state it starts from. Without it a slow rank of a
        layout whose ranks never meet inside a step (dp) could "resume" from a fast rank 0's
        fresh progress.json and run one step fewer than its peers."""
        meta = self.folder / PROGRESS_FILE
        data = json.loads(meta.read_text(encoding="utf-8")) if meta.exists() else None
        if self.watchdog is not None:
            self.watchdog.step = int((data or {}).get("step") or 0) + 1
        if dist.is_available() and dist.is_initialized():
            with self._collective("load_progress", "barrier"):
                dist.barrier(group=self.group)
        return data

    def _shard_path(self, step: int) -> Path:
        return self.folder / f"rank{self.rank}_step{step}.pt"

    def load_shard(self, step: int) -> torch.Tensor | None:
        """This rank's tensor saved with ``step``, or None on every rank when any rank
        lacks its file (collective: all ranks resume from the same step or none does)."""
        path = self._shard_path(step)
        have = path.exists()
        if dist.is_available() and dist.is_initialized():
            flag = torch.tensor([1 if have else 0], dtype=torch.int32)
            if dist.get_backend(self.group) == "nccl":
                flag = flag.cuda()
            with self._collective("agree_resume", "all_reduce"):
                dist.all_reduce(flag, op=dist.ReduceOp.MIN, group=self.group)
            have = bool(flag.item())
        if not have:
            return None
        return torch.load(path, map_location="cpu", weights_only=True)

    def step_done(self, step: int, state: dict[str, Any], shard: torch.Tensor | None = None) -> None:
        """Record that ``step`` finished, then honour a pending stop (collective).

        ``shard``: this rank's piece of the state (each rank writes its own file, named by
        step, so a crash between the files and progress.json never mixes two steps). Rank 0
        writes progress.json once every rank's shard is on disk."""
        self.folder.mkdir(parents=True, exist_ok=True)
        if shard is not None:
            path = self._shard_path(step)
            fd, tmp = create_temp(path)  # a random name, created exclusively, never through a link
            with os.fdopen(fd, "wb") as fh:
                torch.save(shard.detach().cpu(), fh)
            os.replace(tmp, path)
            if dist.is_available() and dist.is_initialized():
                with self._collective("step_shards", "barrier"):
                    dist.barrier(group=self.group)
        if self.rank == 0:
            write_json_atomic(
                self.folder / PROGRESS_FILE, {**state, "step": step, "has_shards": shard is not None}
            )
            print(step_line(step, state), flush=True)  # `sporch logs -f` shows the progress
        if shard is not None:
            # After the barrier of this step progress.json names at least step - 1, so the
            # file of step - 2 is the newest one nobody can need any more.
            old = self._shard_path(step - 2)
            if old.exists():
                old.unlink()
        if self.watchdog is not None:
            self.watchdog.step = step + 1
        if self.stop_agreed():
            if self.rank == 0:
                requeue_self()
            raise RequeueRequested(f"stopped after step {step} on USR2; progress saved, job requeued")


    def finish(self) -> None:
        """The workload completed: drop the per-rank shard files (progress.json stays as a
        record of what ran)."""
        for path in self.folder.glob(f"rank{self.rank}_step*.pt"):
            path.unlink(missing_ok=True)


def step_line(step: int, state: dict[str, Any]) -> str:
    """The line rank 0 prints after each finished step: ``sporch: step 3/10 (41.2 ms)``."""
    total = state.get("total")
    times = state.get("step_ms") or []
    took = f" ({times[-1]:.4g} ms)" if times and len(times) >= step else ""
    return f"sporch: step {step}/{total}{took}" if total else f"sporch: step {step}{took}"


def restart_count() -> int:
    """How many times Slurm restarted this job (0 on the first run)."""
    try:
        return int(os.environ.get("SLURM_RESTART_COUNT", "0"))
    except ValueError:
        return 0


def requeue_self() -> bool:
    """Ask Slurm to requeue the running job. False when not under Slurm or refused."""
    array_job, task = os.environ.get("SLURM_ARRAY_JOB_ID"), os.environ.get("SLURM_ARRAY_TASK_ID")
    job_id = f"{array_job}_{task}" if array_job and task else os.environ.get("SLURM_JOB_ID")
    if not job_id:
        return False
    try:
        subprocess.run(["scontrol", "requeue", job_id], check=True, capture_output=True, timeout=30)
        return True
    except (OSError, subprocess.SubprocessError):
        return False
