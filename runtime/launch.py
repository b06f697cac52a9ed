"""The rank entry point: ``python -m sporch.runtime.launch --plan plan.json``.

Every rank: read its place from Slurm / torchrun (sporch.runtime.rank_env), bind its device,
initialise torch.distributed (NCCL on CUDA, gloo on CPU), build the ParallelContext from
the Plan, run the workload, write ``ranks/rank<N>.json``; rank 0 also writes
``result.json`` with the layout, hosts per rank, timings and errors. A failure is recorded
with its rank and exception, and the process exits non-zero so that
``srun --kill-on-bad-exit`` ends the job.

Every collective is watched (:mod:`sporch.runtime.watchdog`): one that does not complete within
the collective timeout makes every rank write its stacks to ``hang/``, record the hang and exit
with EXIT_HUNG; rank 0's ``result.json`` then names the ranks that never arrived.
"""

from __future__ import annotations

import argparse
import dataclasses
import socket
import sys
import time
from contextlib import nullcontext
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist

from sporch.orchestrator.contract import settings
from sporch.orchestrator.benchstats import fingerprint, provenance
from sporch.orchestrator.contract.exit_codes import EXIT_FAILED, EXIT_OK, EXIT_REQUEUED
from sporch.orchestrator.hangs import HangDiagnosis, collective_text, pg_timeout_s
from sporch.orchestrator.contract.plan import Plan
from sporch.orchestrator.contract.step_cache_summary import summarise_step_cache
from sporch.orchestrator.contract.results import (Fingerprint, JobResult, RankError, RankRecord, error_record, rank_file,
                                                  read_rank_files, result_file, root_cause)
from sporch.runtime.attention.select import selected_kernel
from sporch.runtime.distributed import (cuda_marker, dist_timeout_s, init_distributed, limit_cpu_threads, pick_device,
                                        shutdown)
from sporch.runtime.parallel import ParallelContext
from sporch.runtime.pipelines.phase_timing import process_start_time
from sporch.runtime.preflight import quick_check
from sporch.runtime.progress import Progress, RequeueRequested, restart_count
from sporch.runtime.rank_env import RankEnv, RankEnvError
from sporch.runtime.stage import all_records, clean_up, stage_for_node
from sporch.runtime.watchdog.stacks import dump_stacks_on_sigterm
from sporch.runtime.watchdog.thread import Watchdog, job_timeout_s
from sporch.runtime.workloads import run_workload

#: How long rank 0 waits for the other ranks' files when it cannot gather their records (a
#: failed run only: a healthy world always gathers, see :func:`_gather_records`).
ERROR_COLLECT_S = 5.0


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m sporch.runtime.launch", description=__doc__.splitlines()[0])
    p.add_argument("--plan", required=True, help="plan.json written by `sporch plan --json` / submit")
    p.add_argument("--output-dir", default=None,
                   help="where results go (default: $SPORCH_JOB_DIR, else plan.job.output_dir)")
    return p.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    plan = Plan.load(args.plan)
    output_dir = Path(args.output_dir or settings.raw(settings.JOB_DIR) or plan.job.output_dir)
    try:
        env = RankEnv.detect()
    except RankEnvError as exc:
        print(f"sporch runtime: {exc}", file=sys.stderr)
        return 2
    return run_rank(plan, env, output_dir)


def run_rank(plan: Plan, env: RankEnv, output_dir: Path) -> int:
    """This rank's whole job: open the world, run the plan's point, close the world."""
    dump_stacks_on_sigterm()  # the time limit's SIGTERM: every thread's stack in the rank's log
    place = rank_place(env)
    try:
        device = open_world(env, place, [plan])
    except BaseException as exc:  # noqa: BLE001 - recorded like any failure of the job
        code = finish_point(plan, env, output_dir, place, "failed", {}, failure_record(env, exc))
        shutdown()
        return code
    started = process_start_time()  # the job's start-up: process start, imports, process group
    code = run_point(plan, env, output_dir, device, place,
                     startup_s=time.time() - started if started is not None else None)
    shutdown()
    return code


def rank_place(env: RankEnv) -> dict[str, Any]:
    """The fields of this rank's record that say where it runs."""
    return {
        "rank": env.rank,
        "hostname": env.hostname,
        "node_rank": env.node_rank,
        "local_rank": env.local_rank,
        "launcher": env.source,
        "job_id": env.job_id,
        "restart": restart_count(),
        "started": time.time(),
    }


def open_world(env: RankEnv, place: dict[str, Any], plans: list[Plan]) -> Any:
    """Bind the device and initialise torch.distributed for ``plans`` (one, or a pack of points
    that share the world); ``place`` gets device, threads and backend. Returns the device."""
    for plan in plans:
        if env.world_size != plan.world_size:
            raise RuntimeError(
                f"the launcher started {env.world_size} ranks but the plan needs {plan.world_size} "
                f"({plan.layout.describe()}); submit with nodes={plan.nodes} x {plan.gpus_per_node} tasks"
            )
    device = pick_device(env)
    place["device"] = str(device)
    place["threads"] = limit_cpu_threads(device)
    timeout_s = max(job_timeout_s(p.job.collective_timeout, p.job.time) for p in plans)
    place["backend"] = init_distributed(env, device, timeout_s=dist_timeout_s(pg_timeout_s(timeout_s)))
    return device


def run_point(plan: Plan, env: RankEnv, output_dir: Path, device: Any, place: dict[str, Any], *,
              weight_cache: Any = None, startup_s: float | None = None) -> int:
    """One point on an open world: its watchdog, preflight, staging, process groups (a fresh
    ParallelContext, closed after) and workload; this rank's record, and on rank 0 the point's
    result.json. Returns this rank's exit code (EXIT_OK: the point completed on every rank).

    ``weight_cache``: a :class:`sporch.runtime.models.WeightCache` the points of a pack share
    (one weight load per model and dtype), or None. ``place["started"]`` is when the point
    began (a job's: when its process started). ``startup_s``: the job's start-up (process start to
    an open world), recorded as ``metrics.stages.startup`` beside a generate job's phases."""
    status, metrics, error = "failed", {}, None
    watchdog: Watchdog | None = None
    ctx: ParallelContext | None = None
    try:
        timeout_s = job_timeout_s(plan.job.collective_timeout, plan.job.time)
        watchdog = _start_watchdog(plan, env, output_dir, place, timeout_s)
        checked = None
        if plan.job.preflight:
            with watchdog.collective("preflight", kind="all_gather"):
                checked = quick_check(plan, env.rank, device, env.local_rank)
        # the node's first rank copies the weights; the others wait for its record (no collective:
        # a copy may take longer than any collective timeout)
        staged_plan, _ = stage_for_node(plan, env.local_rank, env.hostname, output_dir,
                                        attempt=f"{env.job_id}-{place['restart']}")
        with watchdog.collective("new_groups", kind="new_group"):
            ctx = ParallelContext.from_plan(staged_plan)
        ctx.watchdog = watchdog
        ctx.weight_cache = weight_cache
        progress = Progress(output_dir=output_dir, rank=env.rank, watchdog=watchdog)
        progress.install_signal_handler()
        metrics = run_workload(staged_plan, ctx, device, progress)
        if startup_s is not None and isinstance(metrics.get("stages"), dict):
            metrics["stages"]["startup"] = {"s": round(startup_s, 6)}
        if plan.model.stage == "node" and env.rank == 0:
            metrics["staging"] = all_records(output_dir)
        metrics.setdefault("attention_kernel", selected_kernel(device, plan.workload.dtype))
        if checked is not None:
            metrics["preflight_quick"] = checked
        if weight_cache is not None:
            metrics["weight_cache"] = weight_cache.stats()
        status = "completed"
    except RequeueRequested as exc:
        status, error = "requeued", RankError(rank=env.rank, error=str(exc))
    except BaseException as exc:  # noqa: BLE001 - recorded, then the rank exits non-zero
        if watchdog is not None:
            watchdog.hold_if_fired()  # a peer's hang broke this rank's collective: the watchdog tells it
        error = failure_record(env, exc)
    return finish_point(plan, env, output_dir, place, status, metrics, error, watchdog, ctx)


def failure_record(env: RankEnv, exc: BaseException) -> RankError:
    """This rank's error record of ``exc`` (its traceback printed to stderr)."""
    error = error_record(env.rank, exc)
    print(error.traceback, file=sys.stderr, flush=True)
    return error


def finish_point(plan: Plan, env: RankEnv, output_dir: Path, place: dict[str, Any], status: str,
                 metrics: dict[str, Any], error: RankError | None, watchdog: Watchdog | None = None,
                 ctx: ParallelContext | None = None) -> int:
    """Write this rank's record, gather every rank's, and on rank 0 the point's result.json;
    stop the watchdog and close the point's process groups (a healthy point's only: a failed
    collective leaves the world unusable, the process ends). Returns the rank's exit code."""
    if watchdog is not None:
        watchdog.hold_if_fired()
    record = RankRecord(**place, status=status, finished=time.time(), metrics=metrics, error=error)
    record.write(rank_file(output_dir, env.rank))

    gathered = _gather_records(plan, record, watchdog)
    if gathered is not None and status == "completed":  # every rank is done with the node's copy
        clean_up(plan, env.local_rank, env.hostname)
    if gathered is None:  # a peer failed after this rank finished
        job_status = "failed"
    elif gathered:  # every rank decides alike (a pack goes on to its next point only if all do)
        job_status = "completed" if {r.status for r in gathered.values()} == {"completed"} else "requeued"
    else:
        job_status = status
    if env.rank == 0:
        job_status = _write_result(plan, output_dir, record, gathered or {})
    if watchdog is not None:
        watchdog.stop()
    if status == "completed" and job_status == "completed":
        if ctx is not None:
            ctx.close()
        return EXIT_OK
    if status == "completed" and job_status == "requeued":
        return EXIT_REQUEUED
    return EXIT_REQUEUED if status == "requeued" else EXIT_FAILED


def _start_watchdog(plan: Plan, env: RankEnv, output_dir: Path, place: dict[str, Any], timeout_s: float) -> Watchdog:
    """This rank's collective watchdog (torch.distributed initialised): on a hang it records the
    rank's failure; on rank 0 also the job's, naming the ranks that never arrived."""
    own: dict[str, RankRecord] = {}

    def on_hang(hang: dict[str, Any]) -> None:
        error = RankError(rank=env.rank, error=hang_error(hang))
        own["record"] = RankRecord(**place, status="failed", finished=time.time(), error=error)
        own["record"].write(rank_file(output_dir, env.rank))

    def on_diagnosis(diagnosis: HangDiagnosis | None) -> None:
        record = own.get("record") or RankRecord(**place, status="failed", finished=time.time())
        _write_hang_result(plan, output_dir, record, diagnosis)

    try:
        store = dist.distributed_c10d._get_default_store()
    except Exception:  # noqa: BLE001 - without the store each rank watches only itself
        store = None
    return Watchdog(rank=env.rank, world_size=env.world_size, timeout_s=timeout_s, folder=output_dir,
                    host=env.hostname, node=env.node_rank, store=store, on_hang=on_hang,
                    on_diagnosis=on_diagnosis if env.rank == 0 else None, backend=place.get("backend"),
                    marker=cuda_marker if place.get("backend") == "nccl" else None).start()


def hang_error(hang: dict[str, Any]) -> str:
    """A rank's error line in its record when the watchdog stopped it."""
    c, stack = hang.get("collective"), f"stacks in hang/rank{hang['rank']}.txt"
    if hang["state"] == "timeout":
        return (f"CollectiveTimeout: waited {c['waited_s']:.0f} s in {collective_text(c)}, longer than the "
                f"collective timeout ({hang['timeout_s']:g} s); {stack}")
    where = f"was waiting in {collective_text(c)}" if c else f"was in no collective (at {hang.get('at') or '?'})"
    return f"CollectiveTimeout: a peer timed out in a collective; this rank {where}; {stack}"


def _gather_records(plan: Plan, own: RankRecord, watchdog: Watchdog | None = None
                    ) -> dict[int, RankRecord] | None:
    """Every rank's record, gathered by every rank that finished its workload (completed, or
    stopped for a requeue, which the ranks decide together): a collective that all ranks of a
    healthy world enter, however late one of them comes (up to the collective timeout). A rank
    that failed does not enter it; the others' gather then fails and rank 0 reads the rank
    files, which every rank writes before this call. {} when this rank does not gather, None
    when the gather failed (the job failed, though this rank finished: it exits non-zero)."""
    if own.status not in ("completed", "requeued") or not dist.is_initialized():
        return {}
    gathered: list[Any] = [None] * plan.world_size
    try:
        with watchdog.collective("gather_records", kind="all_gather") if watchdog is not None else nullcontext():
            dist.all_gather_object(gathered, own)
    except Exception:  # noqa: BLE001 - a peer failed: rank 0 falls back to the rank files
        return None
    return {r.rank: r for r in gathered if r}


def _write_result(plan: Plan, output_dir: Path, own: RankRecord, records: dict[int, RankRecord]) -> str:
    """Rank 0: write result.json from every rank's record (``records``, gathered when the world
    is healthy, else the rank files); returns the job's status."""
    if len(records) < plan.world_size:
        records = _read_records(plan, output_dir, own)
    result = _job_result(plan, own, records)
    result.write(result_file(output_dir))
    return result.status


def _read_records(plan: Plan, output_dir: Path, own: RankRecord) -> dict[int, RankRecord]:
    deadline = time.time() + ERROR_COLLECT_S  # a peer may still be writing its file
    while True:
        records = {**read_rank_files(output_dir), 0: own}
        if len(records) >= plan.world_size or time.time() > deadline:
            return records
        time.sleep(0.25)


def _write_hang_result(plan: Plan, output_dir: Path, own: RankRecord, diagnosis: HangDiagnosis | None) -> None:
    """Rank 0, its watchdog having fired: result.json says the job failed, naming the ranks that
    never arrived (the diagnosis' line) ahead of the ranks' own timeout errors."""
    result = _job_result(plan, own, {**read_rank_files(output_dir), 0: own})
    if diagnosis is not None:
        cause = RankError(rank=diagnosis.failed_rank, error=diagnosis.line)
        result = dataclasses.replace(result, failed_rank=diagnosis.failed_rank, error=diagnosis.line,
                                     errors=[cause] + result.errors, hang=diagnosis.to_dict())
    result = dataclasses.replace(result, status="failed")
    result.write(result_file(output_dir))


def _job_result(plan: Plan, own: RankRecord, records: dict[int, RankRecord]) -> JobResult:
    errors = [r.error for r in sorted(records.values(), key=lambda r: r.rank) if r.error]
    statuses = {r.status for r in records.values()}
    status = "completed" if statuses == {"completed"} and len(records) == plan.world_size else (
        "requeued" if "requeued" in statuses and not any(s == "failed" for s in statuses) else "failed"
    )
    first_error = root_cause(errors)
    summary = _summarise_metrics([records[r].metrics or {} for r in sorted(records)])
    summary.update(_generated_outputs(records))
    cache = summarise_step_cache({r: records[r].metrics or {} for r in records})
    if cache is not None:
        summary["step_cache"] = cache
    hostnames = [r.hostname for r in records.values() if r.hostname]
    return JobResult(
        status=status,
        job_name=plan.job.name,
        layout=plan.layout.sizes(),
        world_size=plan.world_size,
        nodes=plan.nodes,
        gpus_per_node=plan.gpus_per_node,
        cluster=plan.cluster.name,
        workload=plan.workload.kind,
        sequence=plan.sequence.to_dict(),
        hosts={str(r): records[r].hostname for r in sorted(records)},
        distinct_hosts=sorted(set(hostnames)),
        metrics=own.metrics,
        **summary,
        restart=own.restart,
        errors=[e.without_traceback() for e in errors],
        failed_rank=first_error.rank if first_error else None,
        error=first_error.error if first_error else None,
        launcher_host=socket.gethostname(),
        wall_s=(own.finished or own.started or 0.0) - (own.started or 0.0),
        provenance=provenance(plan.cluster.to_dict(), hostnames),
        fingerprint=run_fingerprint(plan, own),
    )


def run_fingerprint(plan: Plan, own: RankRecord) -> Fingerprint:
    """What decides this run's speed besides its plan, as rank 0 sees it: torch's CUDA, cuDNN and
    NCCL versions and the GPU's name on a GPU (the descriptor's model on CPU ranks), the
    container image in force, whether the blocks were compiled and the attention kernel chosen
    (the rank's metrics); the rest from the environment (benchstats.fingerprint)."""
    on_gpu = str(own.device or "").startswith("cuda") and torch.cuda.is_available()
    nccl = None
    if on_gpu and hasattr(torch.cuda, "nccl"):
        try:
            version = torch.cuda.nccl.version()
            nccl = ".".join(map(str, version)) if isinstance(version, tuple) else str(version)
        except Exception:  # noqa: BLE001 - a build without NCCL: none recorded
            nccl = None
    cudnn = torch.backends.cudnn.version() if on_gpu and torch.backends.cudnn.is_available() else None
    container = plan.cluster.container
    compiled = (own.metrics.get("compile") or {}).get("enabled") if isinstance(own.metrics.get("compile"), dict) \
        else None
    kernel = own.metrics.get("attention_kernel")
    return fingerprint(
        cuda=torch.version.cuda if on_gpu else None, cudnn=str(cudnn) if cudnn else None, nccl=nccl,
        gpu_model=torch.cuda.get_device_name(torch.device(own.device)) if on_gpu else plan.cluster.gpu.model,
        gpu_count=plan.world_size, container_image=container.image if container is not None else None,
        compiled=bool(compiled) if compiled is not None else None,
        attention_kernel=str(kernel) if kernel is not None else None)


def _summarise_metrics(per_rank: list[dict[str, Any]]) -> dict[str, Any]:
    """Job-level numbers over all ranks: the worst verify error, the slowest step."""
    out: dict[str, Any] = {}
    errs = [m["max_abs_err"] for m in per_rank if "max_abs_err" in m]
    if errs:
        out["max_abs_err"] = max(errs)
        out["max_rel_err"] = max(m.get("max_rel_err", 0.0) for m in per_rank)
        out["tolerance"] = per_rank[0].get("tolerance")
        out["verified"] = all(m.get("ok", False) for m in per_rank if "max_abs_err" in m)
    medians = [m["step_ms_median"] for m in per_rank if m.get("step_ms_median") is not None]
    if medians:
        out["step_ms_median_max"] = max(medians)
    return out


def _generated_outputs(records: dict[int, RankRecord]) -> dict[str, Any]:
    """A generate job: the files every dp replica wrote (with prompt and seed), in prompt
    order, and each rank's peak memory."""
    metrics = {r: records[r].metrics or {} for r in sorted(records)}
    if not any(m.get("kind") == "generate" for m in metrics.values()):
        return {}
    outputs = sorted((o for m in metrics.values() for o in m.get("outputs", [])), key=lambda o: o["index"])
    return {"outputs": outputs,
            "peak_memory_bytes_by_rank": {str(r): m.get("peak_memory_bytes") for r, m in metrics.items()}}


if __name__ == "__main__":
    sys.exit(main())
