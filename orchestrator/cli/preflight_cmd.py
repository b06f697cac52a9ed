"""``sporch preflight``: a short job that checks every node and measures the plan's links.

The job is planned like any other (``world = ring x ulysses`` by default: the groups a real job
on the cluster gets), its workload is ``preflight`` (runtime/preflight.py), and it is submitted
through the rendered sbatch script (or run here with ``--local``, nodes emulated). When it ends,
its ``metrics.preflight`` is judged (:mod:`sporch.orchestrator.jobs.preflight_report`) and
printed: a table per node, a table per link, and one line per problem naming the node or link.
Exit 0 when nothing is wrong, 1 when a problem is named, the job's code when it failed.
"""

from __future__ import annotations

import dataclasses
import datetime as _dt
import json
import sys
from pathlib import Path
from typing import Any, Optional

import click

from sporch.orchestrator.cli.common import (POSITIVE_SECONDS, FiniteRange, cluster_option, console, human_bytes,
                                            invocation, plain_table)
from sporch.orchestrator.cli.terminal import echo, labelled
from sporch.orchestrator.config.cluster import find_cluster
from sporch.orchestrator.config.job import job_from_dict
from sporch.orchestrator.config.job_spec import JobSpec
from sporch.orchestrator.contract.results import result_file
from sporch.orchestrator.errors import SporchError
from sporch.orchestrator.cli.run_cmd import run_here
from sporch.orchestrator.cli.wait_cmd import EXIT_WAIT_TIMEOUT, wait_for
from sporch.orchestrator.jobs import store
from sporch.orchestrator.jobs.preflight_report import DEFAULT_THRESHOLD, Report, judge
from sporch.orchestrator.jobs.status import poll_one, record_host
from sporch.orchestrator.slurm.states import TERMINAL_STATES
from sporch.orchestrator.submit.registry import get_backend
from sporch.orchestrator.submit import submitter
from sporch.orchestrator.submit.request import default_job_dir
from sporch.orchestrator.contract.numbers import counted

def preflight_job(cluster, nodes: Optional[int], weights: Optional[str], output_dir: str) -> JobSpec:
    """A job with the plan's default layout on ``nodes`` nodes of ``cluster`` that runs the
    preflight workload (a tiny model shape that every layout accepts; it is never built)."""
    heads = cluster.gpus_per_node
    n = nodes or cluster.nodes
    return job_from_dict({
        "name": "preflight", "output_dir": output_dir,
        "model": {"preset": "tiny", "num_heads": heads, "num_kv_heads": heads, "head_dim": 8, "hidden": 8 * heads,
                  **({"weights": weights} if weights else {})},
        "workload": {"kind": "preflight", "seq_len": 4 * n * cluster.gpus_per_node, "steps": 1, "dtype": "float32",
                     "warmup": 0, "repeat": 1},
        "resources": {"nodes": n, "time": "00:10:00"},
        "runtime": {"preflight": False},  # the full check reports what the quick one would stop at
    }, source="<preflight>")


@click.command("preflight",
               short_help="Check every node (GPUs, versions, weights) and the plan's links; name the slow one.")
@cluster_option
@click.option("--nodes", type=click.IntRange(min=1), default=None, help="Nodes to check (default: all of them).")
@click.option("--local", "local", is_flag=True, help="Run here: nodes x GPUs-per-node CPU ranks, nodes emulated.")
@click.option("--weights", default=None, help="A checkpoint path every node must be able to read.")
@click.option("--threshold", type=FiniteRange(0, 1, min_open=True), default=DEFAULT_THRESHOLD, show_default=True,
              help="Name a node or link below this fraction of its peers' median (or of the descriptor, on NCCL).")
@click.option("--output-dir", default="runs", show_default=True, help="Where the job folder goes.")
@click.option("--timeout", "timeout_s", type=POSITIVE_SECONDS, default=600, show_default=True,
              help="Give up waiting after this many seconds.")
@click.option("--json", "as_json", is_flag=True, help="Print the report as JSON.")
def preflight(cluster_ref: str, nodes: Optional[int], local: bool, weights: Optional[str], threshold: float,
              output_dir: str, timeout_s: float, as_json: bool) -> None:
    """Check every node of --cluster (GPUs, versions, memory, weights) and its links' bandwidth."""
    cluster = find_cluster(cluster_ref)
    if nodes is not None and nodes > cluster.nodes:
        raise SporchError(f"--nodes {nodes} exceeds the {counted(cluster.nodes, 'node')} of {cluster.name}")
    job = preflight_job(cluster, nodes, weights, output_dir)
    result = _run_local(cluster, job, timeout_s) if local else _submit_and_wait(cluster, job, timeout_s)
    data = (result.get("metrics") or {}).get("preflight")
    if result.get("status") != "completed" or not data:
        raise SporchError(f"the preflight job did not complete ({result.get('status')}): "
                          f"{result.get('error') or 'no measurements'}; see `sporch logs`")
    report = judge(data, gpus_per_node=cluster.gpus_per_node, intra_gb_per_s=cluster.intra_node.gb_per_s,
                   inter_gb_per_s=cluster.inter_node.gb_per_s, threshold=threshold,
                   per_task=cluster.slurm.gpu_directive == "gpus-per-task", intra_fabric=cluster.intra_node.fabric,
                   inter_fabric=cluster.inter_node.fabric)
    if as_json:
        click.echo(json.dumps(dataclasses.asdict(report), indent=2))
    else:
        _print(report, cluster.name)
    sys.exit(1 if report.problems else 0)


def _run_local(cluster, job: JobSpec, timeout_s: float) -> dict[str, Any]:
    now = _dt.datetime.now()
    _, res = run_here(cluster, job, default_job_dir(cluster, job, now) + "-local", now, timeout_s,
                   console(stderr=True))
    if res is None or res.result is None:
        raise SporchError("the preflight run stopped before writing its result; see its logs")
    return res.result.to_dict()


def _submit_and_wait(cluster, job: JobSpec, timeout_s: float) -> dict[str, Any]:
    prepared = submitter.prepare(cluster, job)
    rec = submitter.submit(prepared, backend="sbatch", command=submitter.command_line(invocation()))
    echo(f"preflight {rec.id} (Slurm job {rec.backend_job_id}) on {cluster.name}: {prepared.request.plan.world_size} "
         "ranks; waiting", err=True, indent=4)
    code = wait_for(rec, timeout=timeout_s, interval=1.0, quiet=True, keeps_running_note=False)
    if code == EXIT_WAIT_TIMEOUT:
        raise SporchError(give_up(rec, timeout_s))
    text = record_host(rec).read_text(str(result_file(Path(rec.job_dir))))
    if text is None:
        raise SporchError(f"the preflight job {rec.id} ended (exit {code}) without a result.json; see "
                          f"`sporch logs {rec.id}`")
    return json.loads(text)


def give_up(rec, timeout_s: float) -> str:
    """Cancel the preflight job ``rec`` that outlived ``--timeout`` (a check nobody waits for
    should not hold the nodes); what happened, in one line."""
    try:
        state = poll_one(rec).state
        if state in TERMINAL_STATES:
            return f"the preflight job {rec.id} ended ({state}) just after --timeout {timeout_s:g} s; see `sporch logs {rec.id}`"
        get_backend(rec.backend, record_host(rec)).cancel([rec.backend_job_id])
    except (SporchError, OSError) as exc:
        return (f"the preflight job {rec.id} (Slurm job {rec.backend_job_id}) did not finish within --timeout "
                f"{timeout_s:g} s and could not be cancelled ({' '.join(str(exc).split())}); cancel it with "
                f"`sporch cancel {rec.id}`")
    rec.cancelled = _dt.datetime.now().isoformat(timespec="seconds")
    store.save(rec)
    return (f"the preflight job {rec.id} (Slurm job {rec.backend_job_id}) was still {state} after --timeout "
            f"{timeout_s:g} s; cancelled it. Raise --timeout (it includes the time in the queue) and run it again")


def _gbps(value: Optional[float]) -> str:
    return "-" if value is None else f"{value:.3g}"


def _ratio(value: Optional[float]) -> str:
    return "-" if value is None else f"{value:.2f}x"


def _print(report: Report, cluster: str) -> None:
    con = console()
    nodes = plain_table(title=f"preflight on {cluster}: nodes", title_justify="left")
    for col in ("node", "ranks", "GPUs seen/expected", "python", "torch", "cuda", "nccl", "host free", "weights",
                "link GB/s"):
        nodes.add_column(col)
    for row in report.nodes:
        w = row.weights
        weights = ("-" if not w.get("path") else
                   f"{human_bytes(w['bytes'])} ok" if w.get("readable") else w.get("error", "unreadable"))
        nodes.add_row(row.node, ",".join(map(str, row.ranks)),
                      f"{'-' if row.gpus_visible is None else row.gpus_visible}/{row.gpus_expected}",
                      *[str(row.versions[k] or "-") for k in ("python", "torch", "cuda", "nccl")],
                      human_bytes(row.host_available_bytes) if row.host_available_bytes else "-", weights,
                      _gbps(row.score_gb_per_s))
    con.print(nodes)
    links = plain_table(title="links (GB/s per rank)", title_justify="left")
    for col in ("kind", "ranks", "nodes", "GB/s", "vs peers", "descriptor", "vs descriptor"):
        links.add_column(col, justify="right" if col in ("GB/s", "vs peers", "descriptor", "vs descriptor") else "left")
    for link in report.links:
        links.add_row(link.kind, link.ranks, link.nodes, _gbps(link.gb_per_s), _ratio(link.vs_peers),
                      _gbps(link.descriptor_gb_per_s), _ratio(link.vs_descriptor))
    con.print(links)
    for line in report.problems:
        labelled(con, "problem", line, "red")
    for line in report.warnings:
        labelled(con, "warning", line, "yellow")
    if not report.problems:
        labelled(con, "ok", "every node agrees and no link is below the threshold of its peers", "green")
