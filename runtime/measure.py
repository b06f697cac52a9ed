"""What the workloads read off the device: a synchronised clock and the peak memory."""

from __future__ import annotations

import resource

import torch


def sync(device: torch.device) -> None:
    """Wait for the work queued on ``device`` (CUDA), so that a clock read after it counts it."""
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def peak_memory_bytes(device: torch.device) -> int:
    """Peak memory of this rank: allocated on the GPU, or the process's peak resident set on the CPU."""
    if device.type == "cuda":
        return int(torch.cuda.max_memory_allocated(device))
    return int(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss) * 1024  # Linux: KiB
