"""torch.distributed set-up for one rank: backend, device binding, timeouts, tear-down."""

from __future__ import annotations

import datetime
import os

import torch
import torch.distributed as dist

from runtime.rank_env import RankEnv

#: Collective timeout: a rank that dies must not leave the others waiting for long.
DEFAULT_TIMEOUT_S = int(os.environ.get("SPORCH_DIST_TIMEOUT_S", "300"))


def pick_device(env: RankEnv) -> torch.device:
    """The rank's device: its local GPU on CUDA machines, else the CPU."""
    if torch.cuda.is_available() and os.environ.get("SPORCH_FORCE_CPU") != "1":
        index = env.local_rank % torch.cuda.device_count()
        torch.cuda.set_device(index)
        return torch.device("cuda", index)
    return torch.device("cpu")


def init_distributed(env: RankEnv, device: torch.device, timeout_s: int = DEFAULT_TIMEOUT_S) -> str:
    """Initialise the default process group (NCCL on CUDA, gloo on CPU); returns the backend."""
    backend = "nccl" if device.type == "cuda" else "gloo"
    env.export()
    # SPORCH_INIT_METHOD (e.g. file:///run/dir/.rendezvous-<id>, set by `sporch run --local`)
    # replaces the MASTER_ADDR/PORT rendezvous: no port to pick, so none to race for.
    init_method = os.environ.get("SPORCH_INIT_METHOD") or "env://"
    kwargs = {}
    if device.type == "cuda":
        kwargs["device_id"] = device
    dist.init_process_group(
        backend=backend,
        init_method=init_method,
        rank=env.rank,
        world_size=env.world_size,
        timeout=datetime.timedelta(seconds=timeout_s),
        **kwargs,
    )
    return backend


def shutdown() -> None:
    if dist.is_available() and dist.is_initialized():
        try:
            dist.destroy_process_group()
        except Exception:  # noqa: BLE001 - tear-down after a failure must not mask the error
            pass
