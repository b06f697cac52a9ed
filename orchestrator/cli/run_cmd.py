"""``sporch run --local``: run a job here, one CPU process per rank, emulating the cluster.

The run is a job of the ``local`` backend (:mod:`sporch.orchestrator.submit.local_backend`): it gets a
job dir and a record like a submission, so ``sporch status``, ``logs``, ``wait`` and ``cancel``
work on its id; this process is its supervisor (the record's job id is its pid).
"""

from __future__ import annotations

import datetime as _dt
import importlib.util
import os
import sys
from pathlib import Path
from typing import Optional

import click

from sporch.orchestrator.cli.common import (POSITIVE_SECONDS, cluster_option, console, invocation, job_arguments, json_text,
                                            load, plain_table)
from sporch.orchestrator.cli.terminal import labelled, visible
from sporch.orchestrator.contract.numbers import counted
from sporch.orchestrator.models.checkpoint_files import CheckpointError, open_checkpoint
from sporch.orchestrator.contract.exit_codes import EXIT_FAILED, EXIT_STOPPED
from sporch.orchestrator.contract.results import JobResult
from sporch.orchestrator.models.generate_inputs import check_generate
from sporch.orchestrator.errors import SporchError
from sporch.orchestrator.host import LOCAL
from sporch.orchestrator.jobs.status import poll
from sporch.orchestrator.jobs.store import JobRecord
from sporch.orchestrator.plan.planner import make_plan
from sporch.orchestrator.submit.local_backend import LocalBackend
from sporch.orchestrator.submit.local_run import LocalRunResult, supervise
from sporch.orchestrator.submit.request import default_job_dir
from sporch.orchestrator.submit.submitter import command_line, prepare, submit


@click.command("run", short_help="Run a job on this machine (--local: one CPU process per rank).")
@cluster_option
@job_arguments
@click.option("--local", "local", is_flag=True, help="Run on this machine: nodes x GPUs-per-node CPU ranks (gloo).")
@click.option("--verify", is_flag=True, help="Run workload.kind=verify: the sharded model against the unsharded one.")
@click.option("--run-dir", default=None, type=click.Path(file_okay=False),
              help="Folder for plan, logs and results (default: <output_dir>/<name>/<time>-local).")
@click.option("--timeout", "timeout_s", default=None, type=POSITIVE_SECONDS,
              help="Kill the run after this many seconds (the job's resources.time is enforced anyway, as Slurm would).")
@click.option("--ignore-memory", is_flag=True,
              help="Start even when the plan's memory estimate for all ranks exceeds this machine's memory.")
@click.option("--json", "as_json", is_flag=True,
              help="Print the run's id, folder and result.json as one JSON document instead of the summary.")
def run(cluster_ref: str, job_path: str, overrides: tuple, local: bool, verify: bool,
        run_dir: Optional[str], timeout_s: Optional[float], ignore_memory: bool, as_json: bool) -> None:
    """Run JOB.yaml on this machine with the layout it would have on --cluster."""
    if not local:
        raise SporchError("`sporch run` runs on this machine only: add --local (use `sporch submit` for a cluster)")
    if verify:
        overrides = tuple(overrides) + ("workload.kind=verify",)
    cluster, job = load(cluster_ref, job_path, overrides)
    if job.workload.kind != "generate":
        _check_weights(job.model.weights)
    now = _dt.datetime.now()
    folder = run_dir or default_job_dir(cluster, job, now) + "-local"
    if Path(folder).exists() and any(Path(folder).iterdir()):
        raise SporchError(f"run dir {folder} is not empty; choose another with --run-dir")
    plan = make_plan(cluster, job)
    if not ignore_memory:
        _check_local_memory(plan)
    if plan.workload.kind == "generate":
        _check_generate(plan.model, plan.workload)
    _check_quant(plan.model)
    rec, res = run_here(cluster, job, folder, now, timeout_s, console(stderr=True), plan=plan)
    if res is None:
        sys.exit(EXIT_FAILED)
    if as_json:
        click.echo(json_text({"id": rec.id, "run_dir": str(res.run_dir), "timed_out": res.timed_out,
                              "result": res.result.to_dict() if res.result is not None else None}))
    else:
        _print_summary(res, plan, console())
    if res.timed_out:  # as Slurm would: the time limit ended the ranks (`sporch wait` exits 3 too)
        click.echo(visible(f"{rec.id}: TIMEOUT: the time limit resources.time={plan.job.time} was reached", one_line=True),
                   err=True)
        sys.exit(EXIT_STOPPED)
    if res.result_error:
        raise SporchError(res.result_error)
    cause = res.result.cause() if res.result is not None else None
    if cause is not None and cause.bad_input:
        # the ranks found the weights unusable (a tensor missing, unexpected or mis-shaped): bad input
        raise SporchError(cause.bad_input)
    if not res.completed or res.result is None:
        sys.exit(EXIT_FAILED)
    if plan.workload.kind == "verify" and not plan.job.entrypoint:
        if not as_json:  # the JSON holds it
            click.echo(visible(f"max_abs_err={res.result.max_abs_err!r}", one_line=True))
        if not res.result.verified:
            click.echo(
                visible(f"sporch: verification failed: max_rel_err={res.result.max_rel_err} > "
                        f"tolerance {res.result.tolerance}", one_line=True),
                err=True,
            )
            sys.exit(EXIT_FAILED)


def run_here(cluster, job, folder: str, now: _dt.datetime, timeout_s: Optional[float], con,
             plan=None) -> tuple[JobRecord, Optional[LocalRunResult]]:
    """Run ``job`` here as a job of the local backend (this process its supervisor, so `sporch
    status/logs/wait/cancel` work on its id): its record, and the run's result (None when it
    was cancelled)."""
    plan = plan or make_plan(cluster, job)
    prepared = prepare(cluster, job, job_dir=folder, now=now, host=LOCAL, plan=plan)
    rec = submit(prepared, backend=LocalBackend(LOCAL, foreground=True), command=command_line(invocation()), now=now)
    req = prepared.request
    labelled(con, "run", f"{plan.job.name} on {cluster.name}: {plan.layout.describe()} = {plan.world_size} CPU "
             f"ranks, {counted(plan.nodes, 'emulated node')}; folder {req.job_dir}; id {rec.id}", "bold", column=4)
    res = _run_with_progress(Path(req.plan_path), Path(req.job_dir), plan.world_size, timeout_s, con)
    _record_final(rec)
    if res is None:
        click.echo(visible(f"{rec.id}: cancelled"), err=True)
    return rec, res


def _record_final(rec: JobRecord) -> None:
    """The run's final state into its record (here and record.json), as `sporch status` would."""
    try:
        poll([rec])
    except (OSError, SporchError):  # the summary below still tells; `sporch status` retries
        pass


def machine_memory_bytes() -> Optional[int]:
    """Physical memory of this machine (None where the OS does not say)."""
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError, AttributeError):
        return None


def _check_local_memory(plan) -> None:
    """Refuse a local run whose ranks (all on this machine) need more than 90% of its memory."""
    total = machine_memory_bytes()
    per_rank = plan.estimates.memory.memory_bytes_per_gpu if plan.estimates is not None else 0
    need = per_rank * plan.world_size
    if total and need > 0.9 * total:
        gib = 2**30
        raise SporchError(
            f"the plan needs about {need / gib:.1f} GiB ({plan.world_size} ranks x {per_rank / gib:.2f} GiB) but this "
            f"machine has {total / gib:.1f} GiB; shrink the job (workload shape, batch, model) or pass "
            "--ignore-memory to start it anyway"
        )


def _check_weights(weights: Optional[str]) -> None:
    """model.weights must be a readable checkpoint here (files, index, headers; no tensors read)."""
    if not weights:
        return
    try:
        open_checkpoint(weights)
    except CheckpointError as exc:
        raise SporchError(str(exc)) from None


def _check_quant(model) -> None:
    """``model.quant`` quantises with torchao, its own extra (pyproject.toml: it is not installed by
    default, since diffusers imports it whenever it is there): refused before any rank starts when
    this machine's Python, which runs the ranks, lacks it (looked up, not imported)."""
    quant = getattr(model, "quant", "none")
    if quant != "none" and importlib.util.find_spec("torchao") is None:
        raise SporchError(f"model.quant={quant} quantises the weights with torchao, which is not installed here: "
                          "pip install 'sporch[quant]' (or set model.quant=none)")


def _check_generate(model, workload) -> None:
    """The pipelines extra, the diffusers folder and the prompt file (stdlib checks, no torch)."""
    problems = check_generate(model, workload)
    if problems:
        raise SporchError(problems[0])


def _run_with_progress(plan_path: Path, folder: Path, world: int, timeout_s, con) -> Optional[LocalRunResult]:
    from rich.progress import BarColumn, Progress, SpinnerColumn, TextColumn, TimeElapsedColumn

    columns = (SpinnerColumn(), TextColumn("ranks finished"), BarColumn(), TextColumn("{task.completed}/{task.total}"),
               TimeElapsedColumn())
    with Progress(*columns, console=con, transient=True, disable=not con.is_terminal) as bar:
        task = bar.add_task("ranks", total=world)
        return supervise(plan_path, folder, timeout_s=timeout_s,
                         on_tick=lambda done, total: bar.update(task, completed=done))


def _print_summary(res: LocalRunResult, plan, con) -> None:
    result = res.result or JobResult(status="failed")  # none written: nothing to show but the logs
    table = plain_table(title="result", show_header=False)
    table.add_column("key", style="bold")
    table.add_column("value")
    status = res.result.status if res.result is not None else "no result (see logs)"
    table.add_row("status", f"{status} (TIMEOUT: time limit {res.time_limit})" if res.timed_out else status)
    table.add_row("layout", plan.layout.describe())
    table.add_row("ranks", f"{len(result.hosts or {})} on {counted(len(result.distinct_hosts or []), 'node')}")
    for key in ("max_abs_err", "max_rel_err", "tolerance", "step_ms_median_max"):
        value = getattr(result, key)
        if value is not None:
            table.add_row(key, f"{value:.3g}" if isinstance(value, float) else str(value))
    metrics = result.metrics or {}
    for key in ("step_ms_median", "tokens_per_s", "comm_ms_per_step", "resumed_from_step", "latents_path"):
        if metrics.get(key) is not None:
            v = metrics[key]
            table.add_row(key, f"{v:.4g}" if isinstance(v, float) else str(v))
    for out in result.outputs or []:
        table.add_row("output", f"{out['path']} (seed {out['seed']}: {out['prompt']})")
    if res.failed_rank is not None or result.error:
        rank = res.result.failed_rank if res.result is not None else res.failed_rank
        table.add_row("failed rank", str(rank))
        table.add_row("error", str(result.error or f"see {res.logs.get(rank, res.run_dir / 'logs')}"))
    if result.hang:
        table.add_row("stacks", str(res.run_dir / "hang"))
    table.add_row("result", str(res.run_dir / "result.json"))
    table.add_row("logs", str(res.run_dir / "logs"))
    con.print(table)
