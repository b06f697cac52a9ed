"""The rank entry point: ``python -m sporch.runtime.launch --plan plan.json``.

Every rank: read its place from Slurm / torchrun (sporch.runtime.rank_env), bind its device,
initialise torch.distributed (NCCL on CUDA, gloo on CPU), build the ParallelContext from
the Plan, run the workload, write ``ranks/rank<N>.json``; rank 0 also writes
``result.json`` with the layout, hosts per rank, timings and errors. A failure is recorded
with its rank and exception, and the process exits non-zero so that
``srun --kill-on-bad-exit`` ends the job.
"""

from __future__ import annotations

import argparse
import os
import socket
import sys
import time
from pathlib import Path
from typing import Any

import torch.distributed as dist

from sporch.orchestrator.contract.benchstats import provenance
from sporch.orchestrator.contract.exit_codes import EXIT_FAILED, EXIT_OK, EXIT_REQUEUED
from sporch.orchestrator.contract.plan import Plan
from sporch.orchestrator.contract.results import (JobResult, RankError, RankRecord, error_record, rank_file,
                                                  read_rank_files, result_file, root_cause)
from sporch.runtime.attention.select import selected_kernel
from sporch.runtime.distributed import init_distributed, limit_cpu_threads, pick_device, shutdown
from sporch.runtime.parallel import ParallelContext
from sporch.runtime.preflight import quick_check
from sporch.runtime.progress import Progress, RequeueRequested, restart_count
from sporch.runtime.rank_env import RankEnv, RankEnvError
from sporch.runtime.stage import all_records, clean_up, stage_for_node
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
    output_dir = Path(args.output_dir or os.environ.get("SPORCH_JOB_DIR") or plan.job.output_dir)
    try:
        env = RankEnv.detect()
    except RankEnvError as exc:
        print(f"sporch runtime: {exc}", file=sys.stderr)
        return 2
    return run_rank(plan, env, output_dir)


def run_rank(plan: Plan, env: RankEnv, output_dir: Path) -> int:
    started = time.time()
    place: dict[str, Any] = {
        "rank": env.rank,
        "hostname": env.hostname,
        "node_rank": env.node_rank,
        "local_rank": env.local_rank,
        "launcher": env.source,
        "job_id": env.job_id,
        "restart": restart_count(),
        "started": started,
    }
    status, metrics, error = "failed", {}, None
    try:
        if env.world_size != plan.world_size:
            raise RuntimeError(
                f"the launcher started {env.world_size} ranks but the plan needs {plan.world_size} "
                f"({plan.layout.describe()}); submit with nodes={plan.nodes} x {plan.gpus_per_node} tasks"
            )
        device = pick_device(env)
        place["device"] = str(device)
        place["threads"] = limit_cpu_threads(device)
        place["backend"] = init_distributed(env, device)
        checked = quick_check(plan, env.rank, device) if plan.job.preflight else None
        staged_plan, _ = stage_for_node(plan, env.local_rank, env.hostname, output_dir)
        ctx = ParallelContext.from_plan(staged_plan)
        progress = Progress(output_dir=output_dir, rank=env.rank)
        progress.install_signal_handler()
        metrics = run_workload(staged_plan, ctx, device, progress)
        if plan.model.stage == "node" and env.rank == 0:
            metrics["staging"] = all_records(output_dir)
        metrics.setdefault("attention_kernel", selected_kernel(device, plan.workload.dtype))
        if checked is not None:
            metrics["preflight_quick"] = checked
        status = "completed"
    except RequeueRequested as exc:
        status, error = "requeued", RankError(rank=env.rank, error=str(exc))
    except BaseException as exc:  # noqa: BLE001 - recorded, then the rank exits non-zero
        error = error_record(env.rank, exc)
        print(error.traceback, file=sys.stderr, flush=True)
    record = RankRecord(**place, status=status, finished=time.time(), metrics=metrics, error=error)
    record.write(rank_file(output_dir, env.rank))

    gathered = _gather_records(plan, record)
    if gathered is not None and status == "completed":  # every rank is done with the node's copy
        clean_up(plan, env.local_rank, env.hostname)
    job_status = status if gathered is not None else "failed"  # a peer failed after this rank finished
    if env.rank == 0:
        job_status = _write_result(plan, output_dir, record, gathered or {})
    shutdown()
    if status == "completed" and job_status == "completed":
        return EXIT_OK
    if status == "completed" and job_status == "requeued":
        return EXIT_REQUEUED
    return EXIT_REQUEUED if status == "requeued" else EXIT_FAILED


def _gather_records(plan: Plan, own: RankRecord) -> dict[int, RankRecord] | None:
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
        dist.all_gather_object(gathered, own)
    except Exception:  # noqa: BLE001 - a peer failed: rank 0 falls back to the rank files
        return None
    return {r.rank: r for r in gathered if r}


def _write_result(plan: Plan, output_dir: Path, own: RankRecord, records: dict[int, RankRecord]) -> str:
    """Rank 0: write result.json from every rank's record (``records``, gathered when the world
    is healthy, else the rank files); returns the job's status."""
    if len(records) < plan.world_size:
        deadline = time.time() + ERROR_COLLECT_S  # a peer may still be writing its file
        while True:
            records = {**read_rank_files(output_dir), 0: own}
            if len(records) >= plan.world_size or time.time() > deadline:
                break
            time.sleep(0.25)
    errors = [r.error for r in sorted(records.values(), key=lambda r: r.rank) if r.error]
    statuses = {r.status for r in records.values()}
    status = "completed" if statuses == {"completed"} and len(records) == plan.world_size else (
        "requeued" if "requeued" in statuses and not any(s == "failed" for s in statuses) else "failed"
    )
    first_error = root_cause(errors)
    summary = _summarise_metrics([records[r].metrics or {} for r in sorted(records)])
    summary.update(_generated_outputs(records))
    hostnames = [r.hostname for r in records.values() if r.hostname]
    result = JobResult(
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
    )
    result.write(result_file(output_dir))
    return status


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
