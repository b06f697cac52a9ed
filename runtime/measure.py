"""What the workloads read off the device: a synchronised clock, the peak memory, and the time a
step spends in collectives."""

from __future__ import annotations

import resource
from typing import Any, Callable, Optional

import torch


def sync(device: torch.device) -> None:
    """Wait for the work queued on ``device`` (CUDA), so that a clock read after it counts it."""
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def peak_memory_bytes(device: torch.device) -> int:
    """Peak memory of this rank: allocated on the GPU, or the process's peak resident set on the CPU
    (Linux: ``VmHWM``, which ``/proc/self/clear_refs`` resets, where ``ru_maxrss`` keeps the peak
    of threads that have ended; elsewhere ``ru_maxrss``)."""
    if device.type == "cuda":
        return int(torch.cuda.max_memory_allocated(device))
    try:
        with open("/proc/self/status", encoding="ascii") as fh:
            for line in fh:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) * 1024  # kB
    except (OSError, ValueError, IndexError):
        pass
    return int(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss) * 1024  # Linux: KiB


#: Profiler event names of collectives (torch.distributed's ops and the backends' own).
COLLECTIVE_OPS = ("all_to_all", "alltoall", "send", "recv", "all_gather", "allgather", "all_reduce", "allreduce",
                  "broadcast", "barrier", "isend", "irecv", "c10d", "gloo", "nccl")


def collective_ms(step: Callable[[], Any], device: torch.device) -> Optional[float]:
    """Milliseconds one call of ``step`` spends in collectives, from the profiler's events (their self
    time: a wrapper and its inner op are not counted twice); None where the profiler cannot run."""
    from torch.profiler import ProfilerActivity, profile

    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if device.type == "cuda" else [])
    try:
        with profile(activities=activities) as prof:
            step()
            sync(device)
    except RuntimeError:
        return None
    total_us = 0.0
    for evt in prof.key_averages():
        if any(op in evt.key.lower() for op in COLLECTIVE_OPS):
            total_us += evt.self_device_time_total if device.type == "cuda" else evt.self_cpu_time_total
    return total_us / 1e3
