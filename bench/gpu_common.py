"""What bench/gpu_attention.py and bench/gpu_model.py share: the device check, a one-GPU Plan,
timing, and the header that names the machine (device, driver, torch, CUDA, cuDNN)."""

from __future__ import annotations

import dataclasses
import os
import statistics
import subprocess
import sys
import time
from typing import Any, Callable

_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if _ROOT not in sys.path:
    sys.path.insert(0, _ROOT)

#: Exit status when there is no CUDA device and --cpu-smoke was not given.
EXIT_NO_GPU = 2


def pick_device(cpu_smoke: bool, prog: str):
    """cuda:0, or the CPU with --cpu-smoke; without either, one line and exit 2."""
    import torch

    if cpu_smoke:
        return torch.device("cpu")
    if not torch.cuda.is_available():
        print(f"{prog}: no CUDA device here (torch {torch.__version__}); run it on a GPU machine, "
              f"or pass --cpu-smoke to check the code path at a tiny shape", file=sys.stderr)
        raise SystemExit(EXIT_NO_GPU)
    return torch.device("cuda", 0)


def one_gpu_plan(cluster: str, job: dict[str, Any]):
    """The Plan for ``job`` on one GPU of ``cluster`` (a cluster name or file): the cluster's GPU
    (its peak TFLOP/s, memory) with nodes = gpus_per_node = 1, every parallel degree 1."""
    from sporch.orchestrator.config.cluster import find_cluster
    from sporch.orchestrator.config.job import job_from_dict
    from sporch.orchestrator.plan.planner import make_plan

    one = dataclasses.replace(find_cluster(cluster), nodes=1, gpus_per_node=1)
    job = {**job, "parallel": {"dp": 1, "cfg": 1, "ring": 1, "ulysses": 1}}
    return make_plan(one, job_from_dict(job, source="bench"))


def world_of_one(device):
    """A ParallelContext over a one-rank process group (gloo on a private store: nothing listens),
    for the sequence-parallel hooks run on one process."""
    import torch.distributed as dist

    from sporch.runtime.parallel import ParallelContext

    if not dist.is_initialized():
        dist.init_process_group("gloo", store=dist.HashStore(), rank=0, world_size=1)
    return ParallelContext.from_layout(device=device)


def sync(device) -> None:
    import torch

    if device.type == "cuda":
        torch.cuda.synchronize(device)


def median_ms(fn: Callable[[], Any], device, warmup: int, repeat: int) -> float:
    """Median wall milliseconds of ``fn`` over ``repeat`` synchronised calls after ``warmup``."""
    for _ in range(warmup):
        fn()
    times = []
    for _ in range(repeat):
        sync(device)
        start = time.perf_counter()
        fn()
        sync(device)
        times.append((time.perf_counter() - start) * 1e3)
    return statistics.median(times)


def fill_random(model):
    """Every parameter of ``model`` drawn on its own device (fan-in scaled weights, norm scales
    near 1, small biases): for timing, where the values do not matter but a model of 12 B
    parameters must not be drawn on the host."""
    import math

    import torch

    with torch.no_grad():
        for name, p in model.named_parameters():
            if p.dim() >= 2:
                p.normal_(0.0, 1.0 / math.sqrt(p.shape[-1]))
            elif name.endswith("weight") or name.endswith("scale"):
                p.normal_(1.0, 0.1)
            else:
                p.normal_(0.0, 0.02)
    return model.eval().requires_grad_(False)


def device_model(model_config, device, dtype):
    """sporch's model of ``model_config`` with random values drawn on ``device`` (:func:`fill_random`):
    built on the meta device in ``dtype`` as ``build_model`` places it (the norms it keeps in
    float32 stay so; casting the built model would make them ``dtype``), then allocated on
    ``device``: a 12 B model in seconds."""
    from sporch.runtime.model import build_model

    return fill_random(build_model(model_config, dtype=dtype, device="meta").to_empty(device=device))


def peak_step_mib(step: Callable[[], Any], device) -> float | None:
    """Peak memory one call of ``step`` allocates above what is allocated before it (MiB);
    None off CUDA."""
    import torch

    if device.type != "cuda":
        return None
    sync(device)
    base = torch.cuda.memory_allocated(device)
    torch.cuda.reset_peak_memory_stats(device)
    step()
    sync(device)
    return (torch.cuda.max_memory_allocated(device) - base) / 2**20


def profile_top(step: Callable[[], Any], device, rows: int = 15) -> str:
    """torch.profiler's table of one call of ``step``: the ``rows`` ops with the most device
    (or, on the CPU, self CPU) time."""
    from torch.profiler import ProfilerActivity, profile

    acts = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if device.type == "cuda" else [])
    sync(device)
    with profile(activities=acts) as prof:
        step()
        sync(device)
    key = "self_cuda_time_total" if device.type == "cuda" else "self_cpu_time_total"
    return prof.key_averages().table(sort_by=key, row_limit=rows)


def _driver() -> str:
    try:
        out = subprocess.run(["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"],
                             capture_output=True, text=True, timeout=10)
        return out.stdout.strip().splitlines()[0] if out.returncode == 0 and out.stdout.strip() else "?"
    except (OSError, subprocess.SubprocessError):
        return "?"


def machine_line(device) -> str:
    """``# device ..., driver ..., torch ..., CUDA ..., cuDNN ...``"""
    import torch

    if device.type != "cuda":
        return f"# device: CPU ({os.cpu_count()} cores), torch {torch.__version__} -- smoke run, not a measurement"
    cudnn = torch.backends.cudnn.version() if torch.backends.cudnn.is_available() else None
    cap = ".".join(map(str, torch.cuda.get_device_capability(device)))
    return (f"# device: {torch.cuda.get_device_name(device)} (sm {cap}), driver {_driver()}, "
            f"torch {torch.__version__}, CUDA {torch.version.cuda}, cuDNN {cudnn}")


def sdpa_scope(kernel: str):
    """A context in which torch's scaled_dot_product_attention (the unsharded model's
    attention) runs ``kernel``, for the kernels SDPA has; others: no constraint."""
    from contextlib import nullcontext

    from torch.nn.attention import SDPBackend, sdpa_kernel

    table = {"cudnn": SDPBackend.CUDNN_ATTENTION, "cuda_flash": SDPBackend.FLASH_ATTENTION,
             "cpu_flash": SDPBackend.FLASH_ATTENTION, "cuda_efficient": SDPBackend.EFFICIENT_ATTENTION,
             "math": SDPBackend.MATH}
    return sdpa_kernel([table[kernel]]) if kernel in table else nullcontext()
