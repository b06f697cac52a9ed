"""Cluster descriptors: loading, validation, lookup.

The descriptor's classes (:class:`ClusterSpec` and its sections) are the Plan's cluster section,
defined in :mod:`sporch.orchestrator.contract.sections`.

A descriptor is a YAML file (``clusters/<name>.yaml``). ``--cluster`` takes a name, looked
up in every folder of ``$SPORCH_CLUSTERS`` (os.pathsep-separated), then
``~/.config/sporch/clusters``, then the built-in folder (the user's own descriptor wins over a
built-in of the same name: a copy made to change the account is the one used); or a path to a
YAML file.

:func:`bandwidth_warnings` names a bandwidth no NIC or link of its kind carries (a network sold in
Gb/s written as GB/s makes every prediction 8 x too fast); the planner adds them to the Plan's
warnings.
"""

from __future__ import annotations

import dataclasses
import os
import re
from pathlib import Path
from typing import Optional

from sporch.orchestrator.config.calibration_file import check_constants, load_calibration
from sporch.orchestrator.config.loading import plain_typed, read_plain, read_yaml, to_typed
from sporch.orchestrator.contract import settings
from sporch.orchestrator.errors import SporchError
from sporch.orchestrator.paths import clusters_dir
from sporch.orchestrator.remote.route import normalize_jump
from sporch.orchestrator.slurm.container import check_container
from sporch.orchestrator.slurm.directives import OPTIONAL_OPTIONS, check_directive_value, check_line, parse_extra
from sporch.orchestrator.contract.durations import is_valid_time, TIME_FORMS
from sporch.orchestrator.contract.vocab import HOST_KEY_POLICIES, MAX_NAME, STAGE_CLEANUP
from sporch.orchestrator.contract.sections import (  # noqa: F401 - the descriptor's classes, re-exported
    COMMON_ENV,
    FABRIC_ENV,
    INTRA_ENV,
    ClusterSpec,
    ContainerSpec,
    GpuSpec,
    InterNodeSpec,
    IntraNodeSpec,
    LoginSpec,
    SlurmSpec,
)

INTRA_FABRICS = ("nvlink", "pcie")
INTER_FABRICS = ("infiniband", "roce", "ethernet")
GPU_DIRECTIVES = ("gpus-per-node", "gres", "gpus-per-task")


def validate_cluster(c: ClusterSpec, source: str) -> ClusterSpec:
    def bad(key: str, msg: str) -> SporchError:
        return SporchError(f"{source}: '{key}' {msg}")

    if not c.name or not re.fullmatch(r"[A-Za-z0-9_.\-]+", c.name):
        raise bad("name", f"must be a non-empty word of letters, digits, '-', '_' or '.', got {c.name!r}")
    if set(c.name) == {"."}:
        raise bad("name", f"{c.name!r} is not a name of its own; use letters or digits")
    if len(c.name) > MAX_NAME:
        raise bad("name", f"is {len(c.name)} characters long; use at most {MAX_NAME}")
    for key in ("nodes", "gpus_per_node"):
        if getattr(c, key) < 1:
            raise bad(key, f"must be >= 1, got {getattr(c, key)}")
    if c.gpu.memory_gib <= 0 or c.gpu.bf16_tflops <= 0:
        raise bad("gpu", "memory_gib and bf16_tflops must be > 0")
    if c.gpu.host_gb_per_s is not None and not c.gpu.host_gb_per_s > 0:
        raise bad("gpu.host_gb_per_s", f"must be > 0 (GB/s host <-> GPU), got {c.gpu.host_gb_per_s}")
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
    if not is_valid_time(c.slurm.time):
        raise bad("slurm.time", f"{c.slurm.time!r} is not a Slurm time ({TIME_FORMS})")
    _check_slurm_values(c, source)
    if c.slurm.cpus_per_task < 1:
        raise bad("slurm.cpus_per_task", f"must be >= 1, got {c.slurm.cpus_per_task}")
    if c.slurm.max_array_size is not None and c.slurm.max_array_size < 1:
        raise bad("slurm.max_array_size", f"must be >= 1 (Slurm's MaxArraySize), got {c.slurm.max_array_size}")
    for k in c.env:
        if not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", k):
            raise bad(f"env.{k}", "is not a valid environment variable name")
    if c.login is not None and c.login.port is not None and not (1 <= c.login.port <= 65535):
        raise bad("login.port", f"must be in 1..65535, got {c.login.port}")
    if c.login is not None:
        try:
            normalize_jump(c.login.proxy_jump)
        except ValueError as e:
            raise bad("login.proxy_jump", str(e)) from None
    if c.login is not None and c.login.host_key_policy not in HOST_KEY_POLICIES:
        raise bad("login.host_key_policy",
                  f"must be one of {', '.join(HOST_KEY_POLICIES)}, got {c.login.host_key_policy!r}")
    if c.calibration_constants:
        check_constants(c.calibration_constants, f"{source}: 'calibration_constants'")
    if c.stage_cleanup not in STAGE_CLEANUP:
        raise bad("stage_cleanup", f"must be one of {', '.join(STAGE_CLEANUP)}, got {c.stage_cleanup!r}")
    if not c.node_local_dir.strip():
        raise bad("node_local_dir", "must be a folder on each node's own disk, e.g. /tmp/sporch-stage")
    if not c.shared_fs_gb_per_s > 0:
        raise bad("shared_fs_gb_per_s", f"must be > 0 (GB/s), got {c.shared_fs_gb_per_s}")
    if c.login is not None and not c.login.host:
        raise bad("login.host", "must be a host name")
    if c.container is not None:
        check_container(c.container, source)
    return c


def _check_slurm_values(c: ClusterSpec, source: str) -> None:
    """Values that become ``#SBATCH`` lines are single-line words (a newline in ``partition`` or
    ``extra`` would add a script line); ``setup`` and ``python`` are shell by design (docs/clusters.md)."""
    try:
        for key in OPTIONAL_OPTIONS:
            value = getattr(c.slurm, key)
            if value not in (None, ""):
                check_directive_value(f"'slurm.{key}'", value)
        parse_extra(list(c.slurm.extra))
        check_line("'python'", c.python or "python")
    except SporchError as exc:
        raise SporchError(f"{source}: {exc}") from None


def _split_jump_string(cfg) -> None:
    """``login.proxy_jump: "a,b:2222"`` (OpenSSH's ``-J`` form) -> the list ``[a, b:2222]`` the
    descriptor's type holds; a list, or anything else, is left for typing and validation."""
    from omegaconf import DictConfig

    login = cfg.get("login")
    if isinstance(login, DictConfig):
        value = login.get("proxy_jump")
        if isinstance(value, str):
            login["proxy_jump"] = [p.strip() for p in value.split(",")] if value.strip() else None


def omegaconf_cluster(p: Path) -> ClusterSpec:
    """The descriptor ``p`` typed by OmegaConf. Calibration not applied, not validated yet."""
    cfg = read_yaml(p)
    if "name" not in cfg:
        cfg["name"] = p.stem
    _split_jump_string(cfg)
    return to_typed(ClusterSpec, [(cfg, str(p))])


def plain_cluster(p: Path) -> Optional[ClusterSpec]:
    """The descriptor ``p`` typed without OmegaConf (config/loading.py, "the plain path"), or
    None where OmegaConf must read it. Calibration not applied, not validated yet."""
    data = read_plain(p)
    if data is None:
        return None
    data.setdefault("name", p.stem)
    login = data.get("login")
    if isinstance(login, dict) and isinstance(login.get("proxy_jump"), str):  # as _split_jump_string
        value = login["proxy_jump"]
        login["proxy_jump"] = [part.strip() for part in value.split(",")] if value.strip() else None
    return plain_typed(ClusterSpec, data, str(p))


def load_cluster_file(path: str | Path) -> ClusterSpec:
    p = Path(path).expanduser()
    spec = plain_cluster(p) or omegaconf_cluster(p)
    spec = dataclasses.replace(spec, source=str(p.resolve()))
    if spec.measured_links is not None:
        raise SporchError(f"{p}: 'measured_links' is filled in from the calibration file (`sporch calibrate "
                          "--links`); remove it and reference the file with 'calibration: FILE'")
    if spec.calibration:
        cal = (p.parent / Path(spec.calibration).expanduser()).resolve()
        file_constants, rates, measured = load_calibration(cal, f"{p}: 'calibration'")
        constants = {**file_constants, **spec.calibration_constants}
        if measured is not None:
            # a latency the descriptor's own calibration_constants set is no longer the measured one
            measured = dataclasses.replace(measured, figures=[k for k in measured.figures
                                                              if k not in spec.calibration_constants])
        spec = dataclasses.replace(spec, calibration=str(cal), calibration_constants=constants,
                                   measured_links=measured if measured is not None and measured.figures else None)
        # link rates a preflight measured (`sporch calibrate --links`) replace the descriptor's
        if "intra_node_gb_per_s" in rates:
            spec = dataclasses.replace(spec, intra_node=dataclasses.replace(spec.intra_node,
                                                                            gb_per_s=rates["intra_node_gb_per_s"]))
        if "inter_node_gb_per_s" in rates:
            spec = dataclasses.replace(spec, inter_node=dataclasses.replace(spec.inter_node,
                                                                            gb_per_s=rates["inter_node_gb_per_s"]))
    return validate_cluster(spec, str(p))


# -- bandwidths no hardware of the kind has ------------------------------------------------
#: The most one NIC of each inter-node fabric carries, GB/s per direction (800 Gb/s: InfiniBand
#: XDR, 800 GbE), and one GPU's intra-node link (NVLink 5: 18 links x 50 GB/s; PCIe Gen6 x16).
MAX_NIC_GB_PER_S = {"infiniband": 100.0, "roce": 100.0, "ethernet": 100.0}
MAX_GPU_LINK_GB_PER_S = {"nvlink": 900.0, "pcie": 128.0}


def bandwidth_warnings(c: ClusterSpec) -> list[str]:
    """A line per bandwidth of ``c`` beyond what any hardware of its kind does: almost always a
    figure in gigabits (how networks are sold) where sporch reads gigabytes per second."""
    out = []
    inter, nics = c.inter_node, max(1, c.inter_node.nics_per_node)
    per_nic, top = inter.gb_per_s / nics, MAX_NIC_GB_PER_S.get(inter.fabric)
    if top is not None and per_nic > top:
        out.append(f"{c.name}: inter_node.gb_per_s {inter.gb_per_s:g} over {nics} NIC(s) is {per_nic:g} GB/s per NIC, "
                   f"more than any {inter.fabric} NIC carries ({top:g} GB/s = {8 * top:g} Gb/s); the unit is "
                   f"gigaBYTES per second per node, all NICs together (a 400 Gb/s NIC is 50 GB/s): set it to "
                   f"{nics} x the NIC's Gb/s / 8")
    intra, top = c.intra_node, MAX_GPU_LINK_GB_PER_S.get(c.intra_node.fabric)
    if top is not None and intra.gb_per_s > top:
        out.append(f"{c.name}: intra_node.gb_per_s {intra.gb_per_s:g} is more than any {intra.fabric} link of one GPU "
                   f"carries ({top:g} GB/s per direction); the unit is gigaBYTES per second per GPU and direction")
    return out


# -- lookup -----------------------------------------------------------------------------
def search_dirs() -> list[tuple[str, Path]]:
    """(label, folder) in lookup order: $SPORCH_CLUSTERS, ~/.config/sporch/clusters, built-in."""
    dirs: list[tuple[str, Path]] = [(settings.CLUSTERS.name, folder) for folder in settings.read(settings.CLUSTERS)]
    dirs.append(("user", Path("~/.config/sporch/clusters").expanduser()))
    dirs.append(("builtin", clusters_dir()))
    return dirs


def cluster_files() -> dict[str, list[tuple[str, Path]]]:
    """name -> every (label, file) of that name, in lookup order (the first one is used)."""
    found: dict[str, list[tuple[str, Path]]] = {}
    for label, d in search_dirs():
        if not d.is_dir():
            continue
        for f in sorted(list(d.glob("*.yaml")) + list(d.glob("*.yml"))):
            found.setdefault(f.stem, []).append((label, f))
    return found


def available_clusters() -> dict[str, tuple[str, Path]]:
    """name -> (label, file); the first folder in lookup order wins (the user's own over a built-in)."""
    return {name: files[0] for name, files in cluster_files().items()}


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
        if os.path.lexists(p):  # a FIFO or folder there: read_yaml says what it is
            return load_cluster_file(p)
        raise SporchError(f"cluster file {ref} not found")
    names = ", ".join(sorted(known)) or "(none)"
    raise SporchError(f"unknown cluster {ref!r}; known clusters: {names} (or pass a path to a YAML file)")
