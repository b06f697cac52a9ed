"""``sporch run --local``: run a job here, one CPU process per rank, emulating the cluster.

The run is a job of the ``local`` backend (:mod:`sporch.orchestrator.submit.local_backend`): it gets a
job dir and a record like a submission, so ``sporch status``, ``logs``, ``wait`` and ``cancel``
work on its id; this process is its supervisor (the record's job id is its pid).
"""

from __future__ import annotations

import datetime as _dt
import os
import sys
from pathlib import Path
from typing import Any, Optional

import click

from sporch.orchestrator.cli.common import POSITIVE_SECONDS, cluster_option, console, invocation, job_arguments, load
from sporch.orchestrator.errors import SporchError
from sporch.orchestrator.host import LOCAL
from sporch.orchestrator.jobs import store
from sporch.orchestrator.jobs.store import JobRecord
from sporch.orchestrator.submit.local_run import supervise
from sporch.orchestrator.contract.exit_codes import EXIT_FAILED
from sporch.orchestrator.submit.local_backend import LOGS
from sporch.orchestrator.submit.request import default_job_dir
from sporch.orchestrator.submit.submitter import command_line, prepare, remove_job_dir, write_files


@click.command("run")
@cluster_option
@job_arguments
@click.option("--local", "local", is_flag=True, help="Run on this machine: nodes x GPUs-per-node CPU ranks (gloo).")
@click.option("--verify", is_flag=True, help="Run workload.kind=verify: the sharded model against the unsharded one.")
@click.option("--run-dir", default=None, type=click.Path(file_okay=False),
              help="Folder for plan, logs and results (default: <output_dir>/<name>/<time>-local).")
@click.option("--timeout", "timeout_s", default=None, type=POSITIVE_SECONDS, help="Kill the run after this many seconds.")
@click.option("--ignore-memory", is_flag=True,
              help="Start even when the plan's memory estimate for all ranks exceeds this machine's memory.")
def run(cluster_ref: str, job_path: str, overrides: tuple, local: bool, verify: bool,
        run_dir: Optional[str], timeout_s: Optional[float], ignore_memory: bool) -> None:
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
    prepared = prepare(cluster, job, job_dir=folder, now=now, host=LOCAL)
    req, plan = prepared.request, prepared.request.plan
    if not ignore_memory:
        try:
            _check_local_memory(plan)
        except SporchError:
            remove_job_dir(LOCAL, req.job_dir, prepared.created_root)
            raise
    if plan.workload.kind == "generate":
        try:
            _check_generate(plan.model, plan.workload)
        except SporchError:
            remove_job_dir(LOCAL, req.job_dir, prepared.created_root)
            raise
    write_files(req, LOCAL)
    rec = JobRecord(id=store.make_id(plan.job.name, now), name=plan.job.name, cluster=cluster.name,
                    backend="local", slurm_job_id=str(os.getpid()), job_dir=req.job_dir,
                    submitted=now.isoformat(timespec="seconds"), command=command_line(invocation()),
                    world_size=plan.world_size, nodes=plan.nodes, workload=plan.workload.kind, logs=dict(LOGS))
    store.save_new(rec)

    from rich.markup import escape

    con = console(stderr=True)
    con.print(f"[bold]run[/] {plan.job.name} on {cluster.name}: {plan.layout.describe()} = "
              f"{plan.world_size} CPU ranks, {plan.nodes} emulated node(s); folder {escape(req.job_dir)}; id {rec.id}")
    res = _run_with_progress(Path(req.plan_path), Path(req.job_dir), plan.world_size, timeout_s, con)
    _record_final(rec)
    if res is None:
        click.echo(f"{rec.id}: cancelled", err=True)
        sys.exit(EXIT_FAILED)
    _print_summary(res, plan, console())
    error = str((res.result or {}).get("error") or "")
    if error.startswith(CHECKPOINT_ERROR):
        # the ranks found the weights unusable (a tensor missing, unexpected or mis-shaped): bad input
        raise SporchError(error[len(CHECKPOINT_ERROR):].strip())
    if not res.ok or res.result is None or res.result.get("status") != "completed":
        sys.exit(EXIT_FAILED)
    if plan.workload.kind == "verify" and not plan.job.entrypoint:
        click.echo(f"max_abs_err={res.result.get('max_abs_err')!r}")
        if not res.result.get("verified", False):
            click.echo(
                f"sporch: verification failed: max_rel_err={res.result.get('max_rel_err')} > "
                f"tolerance {res.result.get('tolerance')}",
                err=True,
            )
            sys.exit(EXIT_FAILED)


CHECKPOINT_ERROR = "CheckpointError:"


def _record_final(rec: JobRecord) -> None:
    """The run's final state into its record (here and record.json), as `sporch status` would."""
    from sporch.orchestrator.jobs.status import poll

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
    per_rank = plan.estimates.get("memory_bytes_per_gpu") or 0
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
    from sporch.orchestrator.contract.checkpoint_files import CheckpointError, open_checkpoint

    try:
        open_checkpoint(weights)
    except CheckpointError as exc:
        raise SporchError(str(exc)) from None


def _check_generate(model, workload) -> None:
    """The pipelines extra, the diffusers folder and the prompt file (stdlib checks, no torch)."""
    from sporch.orchestrator.errors import SporchError
    from sporch.orchestrator.contract.generate_inputs import check_generate

    problems = check_generate(model, workload)
    if problems:
        raise SporchError(problems[0])


def _run_with_progress(plan_path: Path, folder: Path, world: int, timeout_s, con) -> Any:
    from rich.progress import BarColumn, Progress, SpinnerColumn, TextColumn, TimeElapsedColumn

    columns = (SpinnerColumn(), TextColumn("ranks finished"), BarColumn(), TextColumn("{task.completed}/{task.total}"),
               TimeElapsedColumn())
    with Progress(*columns, console=con, transient=True, disable=not con.is_terminal) as bar:
        task = bar.add_task("ranks", total=world)
        return supervise(plan_path, folder, timeout_s=timeout_s,
                         on_tick=lambda done, total: bar.update(task, completed=done))


def _print_summary(res, plan, con) -> None:
    from sporch.orchestrator.cli.common import plain_table

    result = res.result or {}
    table = plain_table(title="result", show_header=False)
    table.add_column("key", style="bold")
    table.add_column("value")
    table.add_row("status", str(result.get("status", "no result (see logs)")))
    table.add_row("layout", plan.layout.describe())
    hosts = result.get("hosts") or {}
    table.add_row("ranks", f"{len(hosts)} on {len(result.get('distinct_hosts') or [])} node name(s)")
    metrics = result.get("metrics") or {}
    for key in ("max_abs_err", "max_rel_err", "tolerance", "step_ms_median_max"):
        if result.get(key) is not None:
            table.add_row(key, f"{result[key]:.3g}" if isinstance(result[key], float) else str(result[key]))
    for key in ("step_ms_median", "tokens_per_s", "comm_ms_per_step", "resumed_from_step", "latents_path"):
        if metrics.get(key) is not None:
            v = metrics[key]
            table.add_row(key, f"{v:.4g}" if isinstance(v, float) else str(v))
    for out in result.get("outputs") or []:
        table.add_row("output", f"{out['path']} (seed {out['seed']}: {out['prompt']})")
    if res.failed_rank is not None or result.get("error"):
        rank = result.get("failed_rank", res.failed_rank)
        table.add_row("failed rank", str(rank))
        table.add_row("error", str(result.get("error") or f"see {res.logs.get(rank, res.run_dir / 'logs')}"))
    table.add_row("result", str(res.run_dir / "result.json"))
    table.add_row("logs", str(res.run_dir / "logs"))
    con.print(table)
