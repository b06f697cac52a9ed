"""``sporch preflight``'s job: what every node has, and how fast the plan's own groups talk.

The job is an ordinary sporch job whose workload is ``preflight`` (:func:`run`) (``sporch preflight`` builds and
submits it with the same machinery as ``submit`` and ``run --local``). Every rank:

1. describes itself (:func:`rank_info`): its node, the GPUs it sees against the descriptor's
   ``gpus_per_node``, the Python, torch, CUDA and NCCL versions, the host's free memory (and the
   GPU's), and whether ``model.weights`` is readable there and its size;
2. measures, with the plan's own process groups (:class:`~sporch.runtime.parallel.ParallelContext`):
   an all-reduce over the world, an all-to-all in every Ulysses group (all groups at once, as
   attention runs them), and every point-to-point hop of every ring group (one hop index at a
   time, every ring at once), timing ``ROUNDS`` rounds of a ``payload`` of bytes after a warm-up (the median round).

Rank 0 gathers it all and returns it as ``metrics.preflight`` of result.json; the judging
(which node or link is slow, which node differs) is the orchestrator's
(:mod:`sporch.orchestrator.jobs.preflight_report`), so it can be re-read and re-judged.

Fault injection for tests (no effect unless set; :mod:`sporch.runtime.faults`): a node whose timed
transfers are slowed, as a bad link would be (:func:`~sporch.runtime.faults.slow_link_s`), and a
node that reports the weights path missing (:func:`~sporch.runtime.faults.hides_weights`).
"""

from __future__ import annotations

import os
import platform
import socket
import statistics
import time
from pathlib import Path
from typing import Any, Callable

import torch
import torch.distributed as dist

from sporch.orchestrator.contract import settings
from sporch.orchestrator.contract.plan import Plan
from sporch.orchestrator.benchstats import driver_version
from sporch.orchestrator.contract.preflight_checks import ENV_KEYS, node_problems
from sporch.runtime import faults
from sporch.runtime.parallel import ParallelContext

ROUNDS = 5
PAYLOAD_BYTES = {"cuda": 64 * 2**20, "cpu": 4 * 2**20}
#: Floats per peer of the small message whose time is a link's latency (64 bytes: no bandwidth in it).
LATENCY_ELEMENTS = 16


def _node() -> str:
    return settings.raw(settings.HOSTNAME) or socket.gethostname()


def _fault_delay() -> float:
    return faults.slow_link_s(_node())


def _visible_gpus(device: torch.device) -> int | None:
    if device.type == "cuda":
        return torch.cuda.device_count()
    for key in ("CUDA_VISIBLE_DEVICES", "SLURM_STEP_GPUS", "SLURM_JOB_GPUS"):
        value = os.environ.get(key)
        if value:
            return len([v for v in value.split(",") if v.strip()])
    return None


def _interfaces() -> list[str] | None:
    """The node's network interfaces' names (None where the platform cannot list them)."""
    try:
        return sorted(name for _, name in socket.if_nameindex())
    except OSError:
        return None


def _available_memory_bytes() -> int | None:
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) * 1024
    except OSError:
        pass
    return None


def weights_check(path: str | None) -> dict[str, Any]:
    """Whether ``path`` is readable on this node, and its size (a folder: all its files)."""
    if not path:
        return {"path": None}
    p = Path(os.path.expanduser(path))
    hidden = faults.hides_weights(_node())
    if hidden or not p.exists():
        return {"path": path, "readable": False, "error": "does not exist"}
    if not os.access(p, os.R_OK):
        return {"path": path, "readable": False, "error": "not readable"}
    files = [p] if p.is_file() else [f for f in p.rglob("*") if f.is_file()]
    unreadable = [str(f) for f in files if not os.access(f, os.R_OK)]
    if unreadable:
        return {"path": path, "readable": False, "error": f"{len(unreadable)} file(s) not readable, e.g. {unreadable[0]}"}
    return {"path": path, "readable": True, "bytes": sum(f.stat().st_size for f in files), "files": len(files)}


def rank_info(plan: Plan, rank: int, device: torch.device, check_weights: bool = True) -> dict[str, Any]:
    """This rank's node, GPUs, versions, free memory and (``check_weights``: the node's first
    rank, the one whose answer is read) the weights check."""
    cuda = device.type == "cuda"
    info: dict[str, Any] = {
        "rank": rank, "node": _node(), "device": str(device),
        "gpus_visible": _visible_gpus(device), "gpus_expected": plan.gpus_per_node,
        "python": platform.python_version(), "torch": torch.__version__,
        "cuda": torch.version.cuda if cuda else None,
        "nccl": ".".join(map(str, torch.cuda.nccl.version())) if cuda else None,
        "host_available_bytes": _available_memory_bytes(),
        "gpu_model": torch.cuda.get_device_name(device) if cuda else None,
        "driver": driver_version(),
        "env": {k: os.environ[k] for k in ENV_KEYS if k in os.environ},
        "interfaces": _interfaces(),
        # a tiny_weights generate job creates its folder after this check
        "weights": weights_check(None if plan.workload.tiny_weights or not check_weights else plan.model.weights),
        # the LoRA adapters (plan.model.lora) are read where they are, on every node
        "lora": [weights_check(e["path"]) for e in (plan.model.lora or []) if check_weights],
    }
    if cuda:
        free, total = torch.cuda.mem_get_info(device)
        info.update(gpu_free_bytes=int(free), gpu_total_bytes=int(total))
    return info


def _timed(fn: Callable[[], None], device: torch.device, barrier_group) -> float:
    """The median seconds of ``ROUNDS`` rounds of ``fn`` (after one warm-up; the median keeps a
    scheduling hiccup out), the fault delay included."""
    fn()
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    dist.barrier(group=barrier_group)
    times = []
    for _ in range(ROUNDS):
        start = time.perf_counter()
        fn()
        delay = _fault_delay()
        if delay:
            time.sleep(delay)
        if device.type == "cuda":
            torch.cuda.synchronize(device)
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def measure(ctx: ParallelContext, device: torch.device, payload: int) -> list[dict[str, Any]]:
    """This rank's measurements: all-reduce (world), all-to-all (its Ulysses group), and its
    outgoing ring hop for each hop index (the ring's next rank)."""
    n = payload // 4
    out: list[dict[str, Any]] = []
    world = dist.get_world_size()
    buf = torch.ones(n, device=device)
    s = _timed(lambda: dist.all_reduce(buf), device, None)
    out.append({"kind": "all_reduce", "group": list(range(world)), "rank": ctx.rank, "bytes": payload, "s": s,
                # bus bandwidth: what each rank moves in a ring all-reduce
                "gb_per_s": 2 * (world - 1) / world * payload / s / 1e9 if world > 1 else None})
    uranks = ctx.group_ranks("ulysses")
    if len(uranks) > 1:
        src, dst = torch.ones(n, device=device), torch.empty(n, device=device)
        k = len(uranks)
        s = _timed(lambda: dist.all_to_all_single(dst, src, group=ctx.ulysses_group), device, ctx.ulysses_group)
        small_src = torch.ones(k * LATENCY_ELEMENTS, device=device)
        small_dst = torch.empty_like(small_src)
        small = _timed(lambda: dist.all_to_all_single(small_dst, small_src, group=ctx.ulysses_group), device,
                       ctx.ulysses_group)
        out.append({"kind": "all_to_all", "group": uranks, "rank": ctx.rank, "bytes": payload, "s": s,
                    "gb_per_s": (k - 1) / k * payload / s / 1e9,
                    "latency_bytes": 4 * k * LATENCY_ELEMENTS, "latency_s": small})
    rranks = ctx.group_ranks("ring")
    r = len(rranks)
    if r > 1:
        me = rranks.index(ctx.rank)
        send, recv = torch.ones(n, device=device), torch.empty(n, device=device)
        small_send, small_recv = torch.ones(LATENCY_ELEMENTS, device=device), torch.empty(LATENCY_ELEMENTS, device=device)
        for hop in range(r):  # hop i: rank i of each ring sends to rank i+1, alone on its link
            src, dst = rranks[hop], rranks[(hop + 1) % r]

            def exchange(a: torch.Tensor = send, b: torch.Tensor = recv) -> None:
                if ctx.rank == src:
                    dist.send(a, dst)
                elif ctx.rank == dst:
                    dist.recv(b, src)

            s = _timed(exchange, device, ctx.ring_group)
            small = _timed(lambda: exchange(small_send, small_recv), device, ctx.ring_group)
            if me == (hop + 1) % r:  # the receiver reports the hop
                out.append({"kind": "ring_p2p", "group": rranks, "src": src, "dst": dst, "rank": ctx.rank,
                            "bytes": payload, "s": s, "gb_per_s": payload / s / 1e9,
                            "latency_bytes": 4 * LATENCY_ELEMENTS, "latency_s": small})
    return out


def run(ctx: ParallelContext, plan: Plan) -> dict[str, Any]:
    """The preflight job's entrypoint (every rank): rank 0 returns everything under ``preflight``."""
    device = ctx.device
    payload = settings.read(settings.PREFLIGHT_BYTES) or PAYLOAD_BYTES.get(device.type, PAYLOAD_BYTES["cpu"])
    info = rank_info(plan, ctx.rank, device)
    links = measure(ctx, device, payload)
    gathered: list[Any] = [None] * dist.get_world_size()
    dist.all_gather_object(gathered, {"info": info, "links": links})
    if ctx.rank != 0:
        return {"preflight_rank": info}
    return {"preflight": {"ranks": [g["info"] for g in gathered], "links": [x for g in gathered for x in g["links"]],
                          "payload_bytes": payload, "rounds": ROUNDS, "backend": dist.get_backend()}}


class PreflightFailed(RuntimeError):
    """The quick check found a node that cannot run the job (named in the message)."""


def quick_check(plan: Plan, rank: int, device: torch.device, local_rank: int = 0) -> dict[str, Any]:
    """What every job does before loading weights (``runtime.preflight: on``, the default): each
    rank describes itself (no bandwidth measured), the descriptions are gathered and every node
    is checked against the others (GPUs for its ranks, versions, the weights path readable and
    the same size). A problem fails every rank at once, naming the node, instead of a hang or a
    wrong answer later. Returns ``{nodes, s}``."""
    start = time.perf_counter()
    info = rank_info(plan, rank, device, check_weights=local_rank == 0)  # one walk of the weights per node
    gathered: list[Any] = [None] * (dist.get_world_size() if dist.is_initialized() else 1)
    if dist.is_initialized():
        dist.all_gather_object(gathered, info)
    else:
        gathered = [info]
    problems = node_problems(gathered, plan.gpus_per_node, per_task=plan.cluster.slurm.gpu_directive == "gpus-per-task")
    if problems:
        raise PreflightFailed("preflight: " + "; ".join(problems) + " (runtime.preflight=off skips this check)")
    return {"nodes": len({g["node"] for g in gathered}), "s": round(time.perf_counter() - start, 3)}
