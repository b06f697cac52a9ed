"""Cluster descriptors: typed schema, validation, lookup.

A descriptor is a YAML file (``clusters/<name>.yaml``). ``--cluster`` takes a name, looked
up in the built-in folder, then every folder of ``$SPORCH_CLUSTERS`` (os.pathsep-separated),
then ``~/.config/sporch/clusters``; or a path to a YAML file.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Dict, List, Optional

from orchestrator.errors import SporchError

INTRA_FABRICS = ("nvlink", "pcie")
INTER_FABRICS = ("infiniband", "roce", "ethernet")
GPU_DIRECTIVES = ("gpus-per-node", "gres", "gpus-per-task")
HOST_KEY_POLICIES = ("reject", "accept-new")

#: Environment exported in every job, before the fabric defaults and the cluster's own env.
COMMON_ENV: dict[str, str] = {
    "TORCH_NCCL_ASYNC_ERROR_HANDLING": "1",
    "OMP_NUM_THREADS": "1",
}

#: Per inter-node fabric defaults (the cluster's ``env`` wins over these).
FABRIC_ENV: dict[str, dict[str, str]] = {
    "infiniband": {"NCCL_IB_DISABLE": "0"},
    "roce": {"NCCL_IB_DISABLE": "0", "NCCL_IB_GID_INDEX": "3"},
    "ethernet": {"NCCL_IB_DISABLE": "1"},
}

#: Per intra-node fabric defaults.
INTRA_ENV: dict[str, dict[str, str]] = {
    "nvlink": {},
    "pcie": {},
}

_TIME_RE = re.compile(r"^(\d+|\d+:\d{1,2}|\d+:\d{1,2}:\d{1,2}|\d+-\d+|\d+-\d+:\d{1,2}|\d+-\d+:\d{1,2}:\d{1,2})$")


@dataclass
class GpuSpec:
    model: str = "unknown"
    memory_gib: float = 80.0
    bf16_tflops: float = 100.0  # dense bf16 TFLOP/s


@dataclass
class IntraNodeSpec:
    fabric: str = "nvlink"  # nvlink | pcie
    gb_per_s: float = 300.0  # GB/s per GPU, one direction


@dataclass
class InterNodeSpec:
    fabric: str = "infiniband"  # infiniband | roce | ethernet
    gb_per_s: float = 100.0  # GB/s per node, one direction, all NICs together
    nics_per_node: int = 1


@dataclass
class SlurmSpec:
    partition: Optional[str] = None
    account: Optional[str] = None
    qos: Optional[str] = None
    constraint: Optional[str] = None
    time: str = "01:00:00"
    cpus_per_task: int = 8
    mem: Optional[str] = None
    exclusive: bool = True
    gpu_directive: str = "gpus-per-node"  # gpus-per-node | gres | gpus-per-task
    extra: List[str] = field(default_factory=list)  # extra sbatch options, e.g. "--reservation=x"


@dataclass
class LoginSpec:
    host: str = "localhost"
    port: int = 22
    user: Optional[str] = None
    identity_file: Optional[str] = None
    workdir: str = "~/sporch"
    setup: List[str] = field(default_factory=list)  # run on the login node before sbatch
    known_hosts: Optional[str] = None  # extra known_hosts file (~/.ssh/known_hosts is always read)
    host_key_policy: str = "reject"  # reject | accept-new (unknown host keys)


@dataclass
class ClusterSpec:
    name: str = ""
    description: str = ""
    nodes: int = 1
    gpus_per_node: int = 8
    gpu: GpuSpec = field(default_factory=GpuSpec)
    intra_node: IntraNodeSpec = field(default_factory=IntraNodeSpec)
    inter_node: InterNodeSpec = field(default_factory=InterNodeSpec)
    slurm: SlurmSpec = field(default_factory=SlurmSpec)
    env: Dict[str, str] = field(default_factory=dict)
    env_defaults: bool = True  # add COMMON_ENV and the per-fabric defaults
    setup: List[str] = field(default_factory=list)  # batch-script lines before srun
    python: str = "python"
    login: Optional[LoginSpec] = None
    # Cost-model calibration (docs/plan.md): a file written by `sporch calibrate` (relative to
    # this descriptor), whose constants the loader copies into calibration_constants; constants
    # given inline win over the file's.
    calibration: Optional[str] = None
    calibration_constants: Dict[str, float] = field(default_factory=dict)
    source: str = ""  # file it was loaded from (filled in by the loader)

    @property
    def world_size(self) -> int:
        return self.nodes * self.gpus_per_node

    def resolved_env(self) -> dict[str, str]:
        """Environment exported in the batch script: defaults, then the cluster's env."""
        env: dict[str, str] = {}
        if self.env_defaults:
            env.update(COMMON_ENV)
            env.update(INTRA_ENV.get(self.intra_node.fabric, {}))
            env.update(FABRIC_ENV.get(self.inter_node.fabric, {}))
        env.update(self.env)
        return env

    def to_dict(self) -> dict[str, Any]:
        from orchestrator.config.loading import to_plain

        d = to_plain(self)
        d["env"] = self.resolved_env()
        return d

    def summary(self) -> str:
        return f"{self.nodes} nodes x {self.gpus_per_node} GPUs = {self.world_size}"


def validate_cluster(c: ClusterSpec, source: str) -> ClusterSpec:
    def bad(key: str, msg: str) -> SporchError:
        return SporchError(f"{source}: '{key}' {msg}")

    if not c.name or not re.fullmatch(r"[A-Za-z0-9_.\-]+", c.name):
        raise bad("name", f"must be a non-empty word of letters, digits, '-', '_' or '.', got {c.name!r}")
    for key in ("nodes", "gpus_per_node"):
        if getattr(c, key) < 1:
            raise bad(key, f"must be >= 1, got {getattr(c, key)}")
    if c.gpu.memory_gib <= 0 or c.gpu.bf16_tflops <= 0:
        raise bad("gpu", "memory_gib and bf16_tflops must be > 0")
    if c.intra_node.fabric not in INTRA_FABRICS:
        raise bad("intra_node.fabric", f"must be one of {', '.join(INTRA_FABRICS)}, got {c.intra_node.fabric!r}")
    if c.inter_node.fabric not in INTER_FABRICS:
        raise bad("inter_node.fabric", f"must be one of {', '.join(INTER_FABRICS)}, got {c.inter_node.fabric!r}")
    if c.intra_node.gb_per_s <= 0 or c.inter_node.gb_per_s <= 0:
        raise bad("gb_per_s", "bandwidths must be > 0")
    if c.inter_node.nics_per_node < 0:
        raise bad("inter_node.nics_per_node", "must be >= 0")
    if c.slurm.gpu_directive not in GPU_DIRECTIVES:
        raise bad("slurm.gpu_directive", f"must be one of {', '.join(GPU_DIRECTIVES)}, got {c.slurm.gpu_directive!r}")
    if not _TIME_RE.match(c.slurm.time):
        raise bad("slurm.time", f"{c.slurm.time!r} is not a Slurm time (MM, HH:MM:SS or D-HH:MM:SS)")
    if c.slurm.cpus_per_task < 1:
        raise bad("slurm.cpus_per_task", f"must be >= 1, got {c.slurm.cpus_per_task}")
    for k in c.env:
        if not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", k):
            raise bad(f"env.{k}", "is not a valid environment variable name")
    if c.login is not None and not (1 <= c.login.port <= 65535):
        raise bad("login.port", f"must be in 1..65535, got {c.login.port}")
    if c.login is not None and c.login.host_key_policy not in HOST_KEY_POLICIES:
        raise bad("login.host_key_policy",
                  f"must be one of {', '.join(HOST_KEY_POLICIES)}, got {c.login.host_key_policy!r}")
    if c.calibration_constants:
        from orchestrator.plan.calibration import check_constants

        check_constants(c.calibration_constants, f"{source}: 'calibration_constants'")
    if c.login is not None and not c.login.host:
        raise bad("login.host", "must be a host name")
    return c


def is_valid_time(value: str) -> bool:
    return bool(_TIME_RE.match(value))


def load_cluster_file(path: str | Path) -> ClusterSpec:
    from orchestrator.config.loading import read_yaml, to_typed

    p = Path(path).expanduser()
    cfg = read_yaml(p)
    if "name" not in cfg:
        cfg["name"] = p.stem
    spec = to_typed(ClusterSpec, [(cfg, str(p))])
    spec.source = str(p.resolve())
    if spec.calibration:
        from orchestrator.plan.calibration import load_constants

        cal = (p.parent / Path(spec.calibration).expanduser()).resolve()
        spec.calibration = str(cal)
        spec.calibration_constants = {**load_constants(cal, f"{p}: 'calibration'"), **spec.calibration_constants}
    return validate_cluster(spec, str(p))


# -- lookup -----------------------------------------------------------------------------
def search_dirs() -> list[tuple[str, Path]]:
    """(label, folder) in lookup order: built-in, $SPORCH_CLUSTERS, ~/.config/sporch/clusters."""
    from orchestrator.paths import clusters_dir

    dirs: list[tuple[str, Path]] = [("builtin", clusters_dir())]
    for part in os.environ.get("SPORCH_CLUSTERS", "").split(os.pathsep):
        if part.strip():
            dirs.append(("SPORCH_CLUSTERS", Path(part).expanduser()))
    dirs.append(("user", Path("~/.config/sporch/clusters").expanduser()))
    return dirs


def available_clusters() -> dict[str, tuple[str, Path]]:
    """name -> (label, file); the first folder in lookup order wins."""
    found: dict[str, tuple[str, Path]] = {}
    for label, d in search_dirs():
        if not d.is_dir():
            continue
        for f in sorted(list(d.glob("*.yaml")) + list(d.glob("*.yml"))):
            found.setdefault(f.stem, (label, f))
    return found


def _looks_like_path(ref: str) -> bool:
    return os.sep in ref or "/" in ref or ref.endswith((".yaml", ".yml"))


def find_cluster(ref: str) -> ClusterSpec:
    """Load a cluster by name (lookup order above) or by path."""
    if not ref:
        raise SporchError("no cluster given; pass --cluster NAME (see `sporch clusters list`)")
    known = available_clusters()
    if ref in known:
        return load_cluster_file(known[ref][1])
    if _looks_like_path(ref):
        p = Path(ref).expanduser()
        if p.is_file():
            return load_cluster_file(p)
        raise SporchError(f"cluster file {ref} not found")
    names = ", ".join(sorted(known)) or "(none)"
    raise SporchError(f"unknown cluster {ref!r}; known clusters: {names} (or pass a path to a YAML file)")
