"""torch.distributed set-up for one rank: backend, device binding, timeouts, joining the job's
ranks, tear-down."""

from __future__ import annotations

import datetime
import os
from typing import Any, Optional

import torch
import torch.distributed as dist

from sporch.orchestrator.contract import settings
from sporch.orchestrator.contract.numbers import is_digits
from sporch.runtime.rank_env import RankEnv

#: The process group's timeout when nothing else says: a rank that dies must not leave the others
#: waiting for long. ``$SPORCH_DIST_TIMEOUT_S`` sets it; else launch.py sets it above the collective
#: watchdog's timeout (sporch.orchestrator.hangs.pg_timeout_s), so the watchdog fires first.
DEFAULT_TIMEOUT_S = 300
#: How long a rank waits at the rendezvous for every rank of the job before the process group is
#: made (at least the process group's timeout). Ranks start apart: Python and torch imports on a
#: shared file system, a node that boots late. Without this wait, torch's own rendezvous counts
#: that skew against the process group's timeout, and a short timeout (one set to catch hangs
#: quickly) fails a healthy job in init_process_group.
JOIN_TIMEOUT_S = 600
#: Store keys of the join (beside torch's, which live under the ``default_pg`` prefix).
JOINED_KEY = "sporch/joined"
JOINED_RANK_KEY = "sporch/joined/{rank}"
ALL_JOINED_KEY = "sporch/joined/all"


def dist_timeout_s(default: float) -> int:
    """The process group's timeout: ``$SPORCH_DIST_TIMEOUT_S`` (whole seconds) when set and valid,
    else ``default``."""
    try:
        value = settings.read(settings.DIST_TIMEOUT_S)
    except ValueError:
        value = None
    return int(value) if value is not None and int(value) > 0 else int(default)


class DeviceError(RuntimeError):
    """A rank has no GPU of its own."""


def gpu_index(*, rank: int, local_rank: int, visible: int, per_task: bool = False) -> int:
    """The CUDA device index for a rank: its local index among the GPUs it sees; where the
    launcher binds GPUs per task (``per_task``: Slurm ``--gpus-per-task``, each task sees only
    its own) and the local index is past them, the task's first GPU. Two ranks of one node never
    share a GPU: any other rank whose local index has no visible GPU is refused (NCCL would
    fail later with "Duplicate GPU detected")."""
    if visible < 1:
        raise DeviceError(f"rank {rank} (local index {local_rank}) sees no GPU; check CUDA_VISIBLE_DEVICES "
                          f"and the job's GPU request")
    if local_rank < visible:
        return local_rank
    if per_task:
        return 0
    raise DeviceError(
        f"rank {rank} (local index {local_rank}) has no GPU of its own: only {visible} GPU(s) visible on "
        f"this node; start at most {visible} tasks per node, or request one GPU per task")


def pick_device(env: RankEnv) -> torch.device:
    """The rank's device: its own GPU on CUDA machines (see :func:`gpu_index`), else the CPU."""
    if torch.cuda.is_available() and not settings.read(settings.FORCE_CPU):
        per_task = env.source == "slurm" and bool(os.environ.get("SLURM_GPUS_PER_TASK"))
        index = gpu_index(rank=env.rank, local_rank=env.local_rank, visible=torch.cuda.device_count(),
                          per_task=per_task)
        torch.cuda.set_device(index)
        return torch.device("cuda", index)
    return torch.device("cpu")


def cpu_threads(environ=None, cores: int | None = None) -> int | None:
    """Intra-op threads for a CPU rank, so that N ranks on a node do not each start one thread
    per core of the node: the CPUs Slurm gave the task (``SLURM_CPUS_PER_TASK``), else the
    node's ``cores`` shared by torchrun's ``LOCAL_WORLD_SIZE`` ranks; None (torch's own choice)
    when ``OMP_NUM_THREADS`` is set, which torch reads itself, or nothing says how many ranks
    share the node."""
    env = os.environ if environ is None else environ

    def count(key: str) -> int:
        value = env.get(key, "")
        return int(value) if is_digits(value) else 0

    if env.get("OMP_NUM_THREADS"):
        return None
    if count("SLURM_CPUS_PER_TASK"):
        return count("SLURM_CPUS_PER_TASK")
    if count("LOCAL_WORLD_SIZE"):
        return max(1, (cores or os.cpu_count() or 1) // count("LOCAL_WORLD_SIZE"))
    return None


def limit_cpu_threads(device: torch.device) -> int:
    """Apply :func:`cpu_threads` on a CPU rank; returns the threads torch uses."""
    if device.type == "cpu":
        n = cpu_threads()
        if n is not None:
            torch.set_num_threads(n)
    return torch.get_num_threads()


def init_distributed(env: RankEnv, device: torch.device, timeout_s: Optional[int] = None,
                     join_timeout_s: Optional[float] = None) -> str:
    """Initialise the default process group (NCCL on CUDA, gloo on CPU); returns the backend.

    ``timeout_s``: the process group's (collectives'); ``join_timeout_s``: how long this rank
    waits for every rank to reach the rendezvous first (default: the larger of JOIN_TIMEOUT_S and
    ``timeout_s``). A rank that is not there by then is named in the error."""
    backend = "nccl" if device.type == "cuda" else "gloo"
    env.export()
    # SPORCH_INIT_METHOD (e.g. file:///run/dir/.rendezvous-<id>, set by `sporch run --local`)
    # replaces the MASTER_ADDR/PORT rendezvous: no port to pick, so none to race for.
    init_method = settings.read(settings.INIT_METHOD) or "env://"
    pg_timeout_s = timeout_s if timeout_s is not None else dist_timeout_s(DEFAULT_TIMEOUT_S)
    join_and_init(backend, init_method, env.rank, env.world_size, pg_timeout_s, join_timeout_s,
                  device_id=device if device.type == "cuda" else None)
    return backend


def join_and_init(backend: str, init_method: str, rank: int, world_size: int, timeout_s: float,
                  join_timeout_s: Optional[float] = None, device_id: Optional[torch.device] = None) -> None:
    """``init_process_group`` once every rank has reached the rendezvous at ``init_method``:
    ``join_timeout_s`` bounds that wait (default: the larger of JOIN_TIMEOUT_S and ``timeout_s``),
    ``timeout_s`` the process group's collectives."""
    pg_timeout = datetime.timedelta(seconds=timeout_s)
    join_timeout = datetime.timedelta(seconds=join_timeout_s if join_timeout_s is not None
                                      else max(JOIN_TIMEOUT_S, timeout_s))
    store, rank, world_size = next(dist.rendezvous(init_method, rank, world_size, timeout=join_timeout))
    store.set_timeout(join_timeout)
    wait_for_every_rank(store, rank, world_size, join_timeout.total_seconds())
    store.set_timeout(pg_timeout)
    kwargs = {"device_id": device_id} if device_id is not None else {}
    # the prefix torch gives the store it makes itself (init_method=...): the same keys as before
    dist.init_process_group(backend=backend, store=dist.PrefixStore("default_pg", store), rank=rank,
                            world_size=world_size, timeout=pg_timeout, **kwargs)


class JoinError(RuntimeError):
    """Not every rank reached the rendezvous in time."""


def wait_for_every_rank(store: Any, rank: int, world_size: int, timeout_s: float) -> None:
    """Block until all ``world_size`` ranks have arrived at ``store`` (whose timeout bounds the
    wait); else raise :class:`JoinError` naming the ranks that did not."""
    store.set(JOINED_RANK_KEY.format(rank=rank), "1")
    if store.add(JOINED_KEY, 1) >= world_size:
        store.set(ALL_JOINED_KEY, "1")
    try:
        store.wait([ALL_JOINED_KEY])
    except RuntimeError as exc:  # the store's timeout (TCPStore: DistStoreError; FileStore: RuntimeError)
        missing = [r for r in range(world_size) if not store.check([JOINED_RANK_KEY.format(rank=r)])]
        raise JoinError(f"rank {rank}: rank(s) {', '.join(map(str, missing)) or '?'} of {world_size} did not reach "
                        f"the rendezvous within {timeout_s:g} s (did they start? their logs say why not)") from exc


def cuda_marker() -> torch.cuda.Event:
    """An event recorded on the current CUDA stream: it completes once the work enqueued before
    it has (a collective on NCCL makes the current stream wait for it), so
    ``cuda_marker().query()`` says whether that collective finished (the watchdog's marker)."""
    event = torch.cuda.Event()
    event.record()
    return event


def shutdown() -> None:
    if dist.is_available() and dist.is_initialized():
        try:
            dist.destroy_process_group()
        except Exception:  # noqa: BLE001 - tear-down after a failure must not mask the error
            pass
