"""Who am I? The rank's place in the job, read from the launcher's environment.

Sources, first match wins:
- torchrun / torch elastic: ``RANK``, ``LOCAL_RANK``, ``WORLD_SIZE``, ``GROUP_RANK`` (node),
  ``MASTER_ADDR``, ``MASTER_PORT``.
- Slurm (srun, and submitit, which runs tasks under srun): ``SLURM_PROCID``,
  ``SLURM_LOCALID``, ``SLURM_NODEID``, ``SLURM_NTASKS``, ``SLURM_JOB_NODELIST``,
  ``SLURM_JOB_ID``. MASTER_ADDR defaults to the first host of the node list and
  MASTER_PORT to ``20000 + job_id % 10000`` (the same rule as the sbatch template).

``sporch run --local`` emulates Slurm: it sets the Slurm variables for every CPU rank and
``SPORCH_HOSTNAME`` to the emulated node's name.
"""

from __future__ import annotations

import os
import re
import socket
import subprocess
from dataclasses import dataclass
from typing import Mapping

from sporch.orchestrator.contract import settings
from sporch.orchestrator.contract.numbers import is_digits


class RankEnvError(RuntimeError):
    pass


@dataclass(frozen=True)
class RankEnv:
    rank: int
    local_rank: int
    node_rank: int
    world_size: int
    master_addr: str
    master_port: int
    hostname: str
    source: str  # "torchrun" | "slurm"
    job_id: str | None = None

    @classmethod
    def detect(cls, environ: Mapping[str, str] | None = None) -> "RankEnv":
        env = os.environ if environ is None else environ
        hostname = settings.raw(settings.HOSTNAME, env) or socket.gethostname()
        if "RANK" in env and "WORLD_SIZE" in env:
            return cls(
                rank=_int(env, "RANK"),
                local_rank=_int(env, "LOCAL_RANK", 0),
                node_rank=_int(env, "GROUP_RANK", 0),
                world_size=_int(env, "WORLD_SIZE"),
                master_addr=env.get("MASTER_ADDR", "127.0.0.1"),
                master_port=_int(env, "MASTER_PORT", 29500),
                hostname=hostname,
                source="torchrun",
                job_id=env.get("TORCHELASTIC_RUN_ID"),
            )
        if "SLURM_PROCID" in env:
            job_id = env.get("SLURM_JOB_ID")
            master_addr = env.get("MASTER_ADDR") or first_host(env.get("SLURM_JOB_NODELIST", ""))
            if "MASTER_PORT" in env:
                port = _int(env, "MASTER_PORT")
            elif job_id and is_digits(job_id):
                port = default_master_port(int(job_id))
            else:
                port = 29500
            return cls(
                rank=_int(env, "SLURM_PROCID"),
                local_rank=_int(env, "SLURM_LOCALID", 0),
                node_rank=_int(env, "SLURM_NODEID", 0),
                world_size=_int(env, "SLURM_NTASKS"),
                master_addr=master_addr,
                master_port=port,
                hostname=hostname,
                source="slurm",
                job_id=job_id,
            )
        raise RankEnvError(
            "no launcher environment found: run under srun/sbatch (SLURM_PROCID), torchrun (RANK, "
            "WORLD_SIZE) or `sporch run --local`"
        )

    def export(self) -> None:
        """Set MASTER_ADDR/PORT, RANK, WORLD_SIZE, LOCAL_RANK for ``init_method='env://'``."""
        os.environ.update(
            MASTER_ADDR=self.master_addr,
            MASTER_PORT=str(self.master_port),
            RANK=str(self.rank),
            WORLD_SIZE=str(self.world_size),
            LOCAL_RANK=str(self.local_rank),
        )


def default_master_port(job_id: int) -> int:
    """The port rule shared with templates/sbatch.j2: 20000-29999, below Linux's ephemeral
    range (32768-60999), so no outgoing connection on the first node can hold it."""
    return 20000 + job_id % 10000


def _int(env: Mapping[str, str], key: str, default: int | None = None) -> int:
    value = env.get(key)
    if value is None:
        if default is None:
            raise RankEnvError(f"environment variable {key} is not set")
        return default
    try:
        return int(value)
    except ValueError:
        raise RankEnvError(f"environment variable {key}={value!r} is not an integer") from None


_BRACKET = re.compile(r"^([^\[,]*)\[([^\]]+)\](.*)$")


def first_host(nodelist: str) -> str:
    """First host of a Slurm node list (``node[03-05,7],gpu1`` -> ``node03``).

    Uses ``scontrol show hostnames`` when available (the authority), else expands the
    first element of the list here.
    """
    if not nodelist:
        raise RankEnvError("SLURM_JOB_NODELIST is empty; set MASTER_ADDR")
    try:
        out = subprocess.run(
            ["scontrol", "show", "hostnames", nodelist],
            capture_output=True, text=True, timeout=10, check=True,
        ).stdout.split()
        if out:
            return out[0]
    except (OSError, subprocess.SubprocessError):
        pass
    first = _split_top_level(nodelist)[0]
    m = _BRACKET.match(first)
    if not m:
        return first
    prefix, ranges, _suffix = m.groups()
    lo = ranges.split(",")[0].split("-")[0]
    return f"{prefix}{lo}"


def _split_top_level(nodelist: str) -> list[str]:
    parts, depth, cur = [], 0, ""
    for ch in nodelist:
        if ch == "[":
            depth += 1
        elif ch == "]":
            depth -= 1
        if ch == "," and depth == 0:
            parts.append(cur)
            cur = ""
        else:
            cur += ch
    parts.append(cur)
    return [p for p in parts if p]
