"""What a benchmark point records beside its raw step times, and the run's provenance.

Torch-free: plain numbers in, plain dicts out (the caller measures). Keys are documented
in docs/contracts.md (result files) and read by sporch.orchestrator.campaign.metrics.

- :func:`step_summary`: median, p90, min over the timed steps (warm-up excluded by the
  caller), tokens/s, achieved TFLOP/s per GPU and fraction of the GPU's peak (FLOPs from the
  planner's estimate), the planner's ideal and predicted (cost model) step times beside the
  measured one.
- :func:`provenance`: sporch version and git revision, torch version, cluster descriptor,
  node list, Slurm job / array ids, and when the result was written (``finished_at``, seconds
  since the epoch: the campaign history orders runs by it).
- :func:`fingerprint`: what decides speed besides the plan (:class:`~.results.Fingerprint`):
  the standard library's part (package versions, driver, variables); the runtime adds torch's.
"""

from __future__ import annotations

import math
import importlib.metadata
import os
import platform
import statistics
import subprocess
import time
from pathlib import Path
from typing import Any, Optional, Sequence

from sporch.orchestrator import __version__
from sporch.orchestrator.contract.results import Fingerprint
from sporch.orchestrator.contract.estimates_section import Estimates

#: Variables of the fingerprint: every one set whose name starts so.
FINGERPRINT_ENV_PREFIXES = ("NCCL_", "CUDA_")
#: The attention kernels with a package of their own (runtime/attention/select.py's SPECS; the
#: others are torch's): the distributions that may hold them, the first one installed counts.
KERNEL_PACKAGES = {"flash_attn": ("flash_attn",), "flash_attn3": ("flash_attn_3", "flash_attn"),
                   "sage": ("sageattention",)}
#: Where the NVIDIA kernel driver says its version (Linux).
DRIVER_VERSION_FILE = Path("/proc/driver/nvidia/version")


def percentile(values: Sequence[float], q: float) -> float:
    """The ``q``-th percentile (0..100) with linear interpolation between order statistics."""
    if not values:
        return float("nan")
    xs = sorted(values)
    pos = (len(xs) - 1) * q / 100.0
    lo, hi = math.floor(pos), math.ceil(pos)
    return xs[lo] + (xs[hi] - xs[lo]) * (pos - lo)


def ideal_ms_per_step(estimates: Optional[Estimates]) -> Optional[float]:
    """The planner's ideal step: compute + all-to-all + ring at the cluster's nominal rates
    (no overlap), in ms; None for a plan without estimates (one built by hand)."""
    return estimates.ideal_s_per_step * 1e3 if estimates is not None else None


def step_summary(step_ms: Sequence[float], *, tokens_per_step: int, estimates: Optional[Estimates],
                 peak_tflops: Optional[float]) -> dict[str, Any]:
    """Statistics of the timed steps and the numbers derived from them."""
    out: dict[str, Any] = {
        "steps_timed": len(step_ms),
        "step_ms": list(step_ms),
        "step_ms_median": statistics.median(step_ms) if step_ms else float("nan"),
        "step_ms_p90": percentile(step_ms, 90),
        "step_ms_min": min(step_ms) if step_ms else float("nan"),
    }
    median_s = out["step_ms_median"] / 1e3
    ok = bool(step_ms) and median_s > 0
    out["tokens_per_s"] = tokens_per_step / median_s if ok else 0.0
    flops = estimates.compute.flops_per_step_per_rank if estimates is not None else None
    out["flops_per_step_per_rank"] = flops
    out["tflops_per_gpu"] = flops / median_s / 1e12 if ok and flops is not None else None
    out["peak_tflops_per_gpu"] = peak_tflops
    out["peak_fraction"] = (out["tflops_per_gpu"] / peak_tflops
                            if out["tflops_per_gpu"] is not None and peak_tflops else None)
    out["ideal_ms_per_step"] = ideal_ms_per_step(estimates)
    predicted = estimates.predicted.step_s if estimates is not None and estimates.predicted is not None else None
    out["predicted_ms_per_step"] = predicted * 1e3 if predicted is not None else None
    out["ideal_comm_bytes_per_step"] = (estimates.communication.comm_bytes_per_rank_per_step
                                        if estimates is not None else None)
    return out


def git_revision(path: Optional[Path] = None) -> Optional[str]:
    """The git commit of the sporch source tree (None outside a checkout)."""
    folder = path or Path(__file__).resolve().parent.parent
    try:
        r = subprocess.run(["git", "-C", str(folder), "rev-parse", "HEAD"], capture_output=True, text=True,
                           timeout=5)
    except (OSError, subprocess.SubprocessError):
        return None
    rev = r.stdout.strip()
    if r.returncode != 0 or not rev:
        return None
    dirty = subprocess.run(["git", "-C", str(folder), "status", "--porcelain", "--untracked-files=no"],
                           capture_output=True, text=True, timeout=5).stdout.strip()
    return rev + ("-dirty" if dirty else "")


def provenance(cluster: dict[str, Any], hosts: Sequence[str] = (), env: Optional[dict[str, str]] = None,
               finished_at: Optional[float] = None) -> dict[str, Any]:
    """Where, when (``finished_at``: now unless given) and with what a result was produced."""
    env = dict(os.environ if env is None else env)
    try:  # the installed distribution's version: no torch import in the contract
        torch_version: Optional[str] = importlib.metadata.version("torch")
    except importlib.metadata.PackageNotFoundError:  # pragma: no cover - the runtime always has torch
        torch_version = None
    return {
        "sporch_version": __version__,
        "git_revision": git_revision(),
        "torch_version": torch_version,
        "cluster": cluster,
        "node_list": env.get("SLURM_JOB_NODELIST"),
        "hosts": sorted(set(hosts)),
        "slurm_job_id": env.get("SLURM_JOB_ID"),
        "slurm_array_job_id": env.get("SLURM_ARRAY_JOB_ID"),
        "slurm_array_task_id": env.get("SLURM_ARRAY_TASK_ID"),
        "finished_at": time.time() if finished_at is None else finished_at,
    }


def kernel_package_version(kernel: Optional[str]) -> Optional[str]:
    """``"flash_attn 2.7.4"``: the installed package of an attention kernel that has one
    (:data:`KERNEL_PACKAGES`); None for torch's own kernels or none installed."""
    for dist in KERNEL_PACKAGES.get(kernel or "", ()):
        version = _package_version(dist)
        if version is not None:
            return f"{dist} {version}"
    return None


def _package_version(name: str) -> Optional[str]:
    try:
        return importlib.metadata.version(name)
    except importlib.metadata.PackageNotFoundError:
        return None


def driver_version(path: Path = DRIVER_VERSION_FILE) -> Optional[str]:
    """The NVIDIA driver's version from ``/proc/driver/nvidia/version`` ("... Kernel Module  550.54.15
    ..."); None without one (no GPU, not Linux)."""
    try:
        text = path.read_text(encoding="utf-8", errors="replace")[:4096]
    except OSError:
        return None
    words = text.split()
    for i, w in enumerate(words):
        if w == "Module" and i + 1 < len(words):
            nxt = words[i + 1]
            if nxt[:1].isdigit():
                return nxt
            if i + 2 < len(words) and words[i + 2][:1].isdigit():  # "Kernel Module for aarch64  550.x"
                return words[i + 2]
    return None


def fingerprint(env: Optional[dict[str, str]] = None, *, cuda: Optional[str] = None, cudnn: Optional[str] = None,
                nccl: Optional[str] = None, gpu_model: Optional[str] = None, gpu_count: Optional[int] = None,
                container_image: Optional[str] = None, compiled: Optional[bool] = None,
                attention_kernel: Optional[str] = None, driver: Optional[str] = None) -> Fingerprint:
    """The run's :class:`Fingerprint`: package versions (Python, torch, diffusers, transformers,
    torchao, the attention kernel's own package), the driver and the variables in effect read here
    (``env``: the process's environment unless given); the caller gives torch's versions (CUDA,
    cuDNN, NCCL), the GPUs, the container image, compile and the kernel."""
    env = dict(os.environ if env is None else env)
    return Fingerprint(
        sporch=__version__, torch=_package_version("torch"), cuda=cuda, cudnn=cudnn, nccl=nccl,
        diffusers=_package_version("diffusers"), driver=driver if driver is not None else driver_version(),
        python=platform.python_version(), transformers=_package_version("transformers"),
        torchao=_package_version("torchao"), attention_kernel_version=kernel_package_version(attention_kernel),
        gpu_model=gpu_model, gpu_count=gpu_count,
        env={k: v for k, v in sorted(env.items()) if k.startswith(FINGERPRINT_ENV_PREFIXES)},
        socket_ifname=env.get("NCCL_SOCKET_IFNAME") or env.get("GLOO_SOCKET_IFNAME"),
        container_image=container_image or None, compiled=compiled, attention_kernel=attention_kernel)
