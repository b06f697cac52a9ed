"""Packed points: ``python -m sporch.runtime.pack --list points.list --attempt ID``.

Runs every point listed (one point directory per line, each with its ``plan.json``) in ONE
process world: the ranks start Python, import torch and initialise torch.distributed once, then
run the points one after another, each with a fresh ParallelContext from the same world (its
groups closed after it), its own watchdog, its own ``ranks/`` records and ``result.json`` (the
same contract as ``sporch.runtime.launch``), and its rank logs in ``<point>/logs/``. Points that
share a model, weights, seed and dtype load the weights once (:class:`WeightCache`).

A point that fails or hangs ends this launch (its collectives may have left the world
unusable): rank 0 has written its result, every rank exits non-zero, and the batch script
(templates/campaign_pack.sbatch.j2) launches the pack again. The new launch skips the points
that are done (a completed result) and those already tried in this attempt (``--attempt``,
the Slurm job id: rank 0 marks a point's ``pack_attempt`` file before it starts it), so one bad
point never takes the others down, and a re-run of the campaign (a new job) retries only the
points without a completed result.

Exit codes: EXIT_OK, every point of the pack completed; EXIT_PACK_FAILED, the pack is over (no
point left to run) and some point failed in this attempt; anything else, a point failed in this
launch (the script launches the pack again).
"""

from __future__ import annotations

import argparse
import contextlib
import os
import sys
import time
from pathlib import Path
from typing import Any, Iterator

import torch.distributed as dist

from sporch.orchestrator.contract import settings
from sporch.orchestrator.contract.exit_codes import EXIT_BAD_INPUT, EXIT_OK, EXIT_PACK_FAILED
from sporch.orchestrator.contract.plan import Plan
from sporch.orchestrator.contract.results import JobResult, ResultFileError, result_file
from sporch.orchestrator.safe_files import write_atomic
from sporch.runtime.distributed import shutdown
from sporch.runtime.launch import failure_record, finish_point, open_world, rank_place, run_point
from sporch.runtime.models import WeightCache
from sporch.runtime.pipelines.phase_timing import process_start_time
from sporch.runtime.rank_env import RankEnv, RankEnvError
from sporch.runtime.watchdog.stacks import dump_stacks_on_sigterm

#: Rank 0 writes the attempt id into this file of a point's directory before the point starts.
ATTEMPT_FILE = "pack_attempt"


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m sporch.runtime.pack", description=__doc__.splitlines()[0])
    p.add_argument("--list", required=True, help="a file naming one point directory per line")
    p.add_argument("--attempt", default=None,
                   help="this job's id (default $SLURM_JOB_ID): points tried under it are not run again")
    return p.parse_args(argv)


def read_list(path: str) -> list[Path]:
    return [Path(line) for line in Path(path).read_text(encoding="utf-8").splitlines() if line.strip()]


def completed(point: Path) -> bool:
    try:
        return JobResult.load(result_file(point)).status == "completed"
    except (OSError, ResultFileError):
        return False


def tried_in(point: Path, attempt: str) -> bool:
    try:
        return (point / ATTEMPT_FILE).read_text(encoding="utf-8").strip() == attempt
    except OSError:
        return False


def points_left(points: list[Path], attempt: str) -> tuple[list[Path], list[Path]]:
    """(points to run: not completed, not tried in ``attempt``; points that failed in it)."""
    todo, failed = [], []
    for point in points:
        if completed(point):
            continue
        (failed if tried_in(point, attempt) else todo).append(point)
    return todo, failed


@contextlib.contextmanager
def point_logs(point: Path, env: RankEnv) -> Iterator[None]:
    """This rank's stdout and stderr into ``<point>/logs/<job>_<rank>.out|.err`` while the
    point runs (file descriptors 1 and 2, so library and C++ output lands there too)."""
    logs = point / "logs"
    logs.mkdir(parents=True, exist_ok=True)
    stem = f"{env.job_id or 'local'}_{env.rank}"
    saved = []
    try:
        for fd, stream, suffix in ((1, sys.stdout, "out"), (2, sys.stderr, "err")):
            stream.flush()
            target = os.open(logs / f"{stem}.{suffix}", os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
            saved.append((fd, os.dup(fd), stream))
            os.dup2(target, fd)
            os.close(target)
        yield
    finally:
        for fd, copy, stream in reversed(saved):
            stream.flush()
            os.dup2(copy, fd)
            os.close(copy)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    try:
        env = RankEnv.detect()
        points = read_list(args.list)
    except (RankEnvError, OSError) as exc:
        print(f"sporch runtime: {exc}", file=sys.stderr)
        return EXIT_BAD_INPUT
    attempt = args.attempt or os.environ.get("SLURM_JOB_ID")
    if not attempt:
        print("sporch runtime: a pack needs --attempt (an id unique to this run) outside Slurm", file=sys.stderr)
        return EXIT_BAD_INPUT
    # the files are still here (the previous launch has ended): every rank reads the same
    todo, failed = points_left(points, attempt)
    if not todo:
        return EXIT_PACK_FAILED if failed else EXIT_OK
    return run_pack(todo, env, attempt, failed_before=bool(failed))


def run_pack(todo: list[Path], env: RankEnv, attempt: str, *, failed_before: bool = False) -> int:
    dump_stacks_on_sigterm()
    plans = [Plan.load(str(p / "plan.json")) for p in todo]
    place = rank_place(env)
    try:
        device = open_world(env, place, plans)
    except BaseException as exc:  # noqa: BLE001 - the first point records why the world did not open
        with point_logs(todo[0], env):
            return finish_point(plans[0], env, todo[0], place, "failed", {}, failure_record(env, exc))
    started = process_start_time()  # the pack's start-up, paid by its first point (metrics.stages)
    startup_s = time.time() - started if started is not None else None
    agreed = _agreed(todo, env)
    if agreed != todo:  # a folder changed between the ranks' reads: rank 0's list is the one run
        todo, plans = agreed, [Plan.load(str(p / "plan.json")) for p in agreed]
    cache = WeightCache()
    code = EXIT_OK
    for i, (point, plan) in enumerate(zip(todo, plans)):
        os.environ[settings.JOB_DIR.name] = str(point)
        if "TORCH_FR_DUMP_TEMP_FILE" in os.environ:  # NCCL's flight recorder: into the point's hang/
            (point / "hang").mkdir(parents=True, exist_ok=True)
            os.environ["TORCH_FR_DUMP_TEMP_FILE"] = str(point / "hang" / "fr_trace_rank_")
        if env.rank == 0:
            write_atomic(point / ATTEMPT_FILE, f"{attempt}\n", fsync=False)  # never through a link
        dist.barrier()  # the mark is written before any rank starts the point
        with point_logs(point, env):
            print(f"sporch: pack point {point.name} ({plan.layout.describe()}), attempt {attempt}",
                  file=sys.stderr, flush=True)
            code = run_point(plan, env, point, device, {**place, "started": time.time()}, weight_cache=cache,
                             startup_s=startup_s if i == 0 else None)
        if code != EXIT_OK:
            break
    shutdown()
    if code == EXIT_OK and failed_before:
        return EXIT_PACK_FAILED
    return code


def _agreed(todo: list[Path], env: RankEnv) -> list[Path]:
    """Rank 0's list of points to run, on every rank (the ranks read the same files, so it is
    theirs too unless a folder changed between their reads)."""
    box: list[Any] = [[str(p) for p in todo] if env.rank == 0 else None]
    dist.broadcast_object_list(box, src=0)
    return [Path(p) for p in box[0]]


if __name__ == "__main__":
    sys.exit(main())
