"""Denoising that survives a requeue: each rank's step state on disk, resumed bit for bit.

After every denoising step each rank writes its own file
``<job dir>/checkpoint/generate_rank<R>.b<batch>.s<step>.pt``: its token shard of the latents,
its scheduler's state (UniPC's history of model outputs and timesteps, the step index,
the last sample; every plain value and tensor the scheduler object holds) and the step times.
The two newest files are kept; a file is written to a temporary name and renamed
(safe_files.write_atomic).

A stop (USR2 before the time limit, see sporch.runtime.progress) is agreed inside the dp
replica at a step boundary (every rank of the replica stops after the same step; replicas run
their own prompts, so they do not wait for each other), then the job is requeued. The next
run finds, per rank, the newest step of the batch it was denoising; the replica agrees on the
oldest of them (a rank killed between two files has one step less), every rank loads that
step's file, puts the scheduler's state back and carries on: the latents it ends with are the
uninterrupted run's, bit for bit.

Each file carries the key of the run that wrote it (:func:`plan_key`: the Plan's model, workload,
layout, sequence, heads and placement, hashed): a file another plan wrote (the job file changed
and was run again into the same folder) is never resumed from; the batch restarts.
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import re
from pathlib import Path
from typing import Any, Callable

import torch
import torch.distributed as dist

from sporch.orchestrator.contract.job_files import JobFiles
from sporch.orchestrator.safe_files import write_atomic
from sporch.runtime.parallel import ParallelContext

_STEP = re.compile(r"\.s(\d+)\.pt$")
#: Scheduler attributes that are configuration, not state.
_SKIP = ("config", "_internal_dict")


#: The Plan's parts that decide a denoising run's step states (not its job's name, time or
#: estimates: a requeue or an identical job run again resumes).
KEY_SECTIONS = ("layout", "model", "workload", "sequence", "heads", "placement")


def plan_key(plan: Any) -> str:
    """What decides the step files' contents, hashed from the Plan (a plain JSON dict)."""
    doc = plan.to_dict()
    text = json.dumps({k: doc.get(k) for k in KEY_SECTIONS}, sort_keys=True, default=str)
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def _plain(value: Any) -> bool:
    """Whether ``value`` can be saved and loaded back with ``torch.load(weights_only=True)``."""
    if value is None or isinstance(value, (bool, int, float, str, torch.Tensor)):
        return True
    if isinstance(value, (list, tuple)):
        return all(_plain(v) for v in value)
    return False


def scheduler_state(scheduler: Any) -> dict[str, Any]:
    """Every plain attribute of ``scheduler`` (tensors cloned to the CPU)."""
    out = {}
    for key, value in vars(scheduler).items():
        if key in _SKIP or not _plain(value):
            continue
        out[key] = _to_cpu(value)
    return out


def restore_scheduler(scheduler: Any, state: dict[str, Any], device: torch.device) -> None:
    """Put ``state`` back; each tensor goes where it was (the CPU, or ``device``: the GPU)."""
    for key, value in state.items():
        setattr(scheduler, key, _from_saved(value, device))


def _to_cpu(value: Any) -> Any:
    """Tensors as ``{"tensor": CPU copy, "on": device type}``, lists and tuples kept."""
    if isinstance(value, torch.Tensor):
        return {"tensor": value.detach().to("cpu").clone(), "on": value.device.type}
    if isinstance(value, (list, tuple)):
        return type(value)(_to_cpu(v) for v in value)
    return value


def _from_saved(value: Any, device: torch.device) -> Any:
    if isinstance(value, dict) and set(value) == {"tensor", "on"}:
        return value["tensor"].to("cpu" if value["on"] == "cpu" else device)
    if isinstance(value, (list, tuple)):
        return type(value)(_from_saved(v, device) for v in value)
    return value


class DenoiseCheckpoint:
    """This rank's step files, and the replica-wide agreement on stopping and resuming."""

    def __init__(self, output_dir: str | os.PathLike, ctx: ParallelContext | None,
                 stop_requested: Callable[[], bool] = lambda: False, key: str = "") -> None:
        self.folder = Path(JobFiles(str(output_dir)).checkpoint)
        self.ctx = ctx
        self.rank = ctx.rank if ctx is not None else 0
        self.stop_requested = stop_requested
        self.key = key  # plan_key of this run: a file written under another is not resumed from

    def _path(self, batch: int, step: int) -> Path:
        return self.folder / f"generate_rank{self.rank}.b{batch}.s{step}.pt"

    def _mine(self, batch: int) -> list[int]:
        """Steps of ``batch`` this rank has a file for."""
        found = (_STEP.search(p.name) for p in self.folder.glob(f"generate_rank{self.rank}.b{batch}.s*.pt"))
        return sorted(int(m.group(1)) for m in found if m)

    def save(self, batch: int, step: int, x_local: torch.Tensor, scheduler: Any, step_ms: list[float]) -> None:
        """After finished step ``step`` (1-based) of prompt batch ``batch``."""
        buf = io.BytesIO()
        torch.save({"x": x_local.detach().to("cpu").clone(), "scheduler": scheduler_state(scheduler),
                    "step_ms": list(step_ms), "key": self.key}, buf)
        write_atomic(self._path(batch, step), buf.getvalue(), fsync=False)
        # the two newest stay: a rank one step behind its replica still finds the agreed step
        self._path(batch, step - 2).unlink(missing_ok=True)

    def resume(self, batch: int, device: torch.device) -> tuple[int, dict[str, Any]] | None:
        """(finished step, saved state) to resume ``batch`` from, the same step on every rank
        of the replica; None when any rank of it has nothing, or a file another plan wrote
        (its key differs: the batch restarts; collective over the replica)."""
        steps = self._mine(batch)
        newest = steps[-1] if steps else 0
        agreed = self._replica_reduce(newest, dist.ReduceOp.MIN)
        if agreed <= 0:
            return None
        # ranks of a replica meet in every step, so they are at most one step apart and each
        # keeps its two newest files: all have the agreed one unless something removed it
        state = torch.load(self._path(batch, agreed), map_location="cpu", weights_only=True) if agreed in steps else None
        if not self._replica_reduce(int(state is not None and state.get("key") == self.key), dist.ReduceOp.MIN):
            return None
        state["x"] = state["x"].to(device)
        return agreed, state

    def stop_agreed(self) -> bool:
        """Whether any rank of the replica was asked to stop (collective over the replica)."""
        return bool(self._replica_reduce(1 if self.stop_requested() else 0, dist.ReduceOp.MAX))

    def finish(self, batch: int) -> None:
        """The batch's latents are kept: its step files are not needed any more."""
        for step in self._mine(batch):
            self._path(batch, step).unlink(missing_ok=True)

    def _replica_reduce(self, value: int, op) -> int:
        """``value`` reduced over this rank's dp replica (its sequence group, then its cfg group)."""
        ctx = self.ctx
        if ctx is None or not dist.is_initialized():
            return value
        t = torch.tensor([value], dtype=torch.int64)
        if dist.get_backend() == "nccl":
            t = t.to(ctx.device)
        with ctx.guard():
            if ctx.sequence_size > 1:
                dist.all_reduce(t, op=op, group=ctx.sequence_group)
            if ctx.cfg > 1:
                dist.all_reduce(t, op=op, group=ctx.cfg_group)
        return int(t.item())
