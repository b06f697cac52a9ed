"""Build a cluster descriptor (``clusters/<name>.yaml``) from what Slurm says about a partition.

Slurm knows node count, CPUs, memory, GPU gres count and type, features and the time limit.
It does not know GPU memory/TFLOP/s or the fabrics: those come from a small table keyed by the
gres type (or defaults) and are listed in ``guessed`` (dotted keys) and marked ``# guessed`` in
the YAML. The descriptor keys follow :mod:`sporch.orchestrator.config.cluster` (``ClusterSpec``).
"""

from __future__ import annotations

import datetime as _dt
import json
import re
from collections import Counter
from typing import Any, Dict, List, Optional, Tuple

from sporch.orchestrator.contract.numbers import is_digits
from sporch.orchestrator.errors import SporchError
from sporch.orchestrator.host import LOCAL, Host
from sporch.orchestrator.slurm.commands import DEFAULT_TIMEOUT, run_slurm

#: gres type substring -> (model, memory_gib, dense bf16 TFLOP/s, intra fabric, intra GB/s per GPU
#: one direction, inter fabric, inter GB/s per node, NICs per node). Typical, not measured.
GPU_TABLE: List[Tuple[str, Tuple[str, float, float, str, float, str, float, int]]] = [
    ("gh200", ("GH200", 96.0, 989.0, "nvlink", 450.0, "infiniband", 50.0, 1)),
    ("h200", ("H200", 140.0, 989.0, "nvlink", 450.0, "infiniband", 400.0, 8)),
    ("h100", ("H100", 80.0, 989.0, "nvlink", 450.0, "infiniband", 400.0, 8)),
    ("b200", ("B200", 180.0, 2250.0, "nvlink", 900.0, "infiniband", 400.0, 8)),
    ("a100_40", ("A100-40GB", 40.0, 312.0, "nvlink", 300.0, "infiniband", 100.0, 4)),
    ("a100", ("A100", 80.0, 312.0, "nvlink", 300.0, "infiniband", 100.0, 4)),
    ("l40s", ("L40S", 48.0, 362.0, "pcie", 32.0, "ethernet", 25.0, 1)),
    ("l40", ("L40", 48.0, 181.0, "pcie", 32.0, "ethernet", 25.0, 1)),
    ("l4", ("L4", 24.0, 121.0, "pcie", 32.0, "ethernet", 12.5, 1)),
    ("a10", ("A10", 24.0, 125.0, "pcie", 32.0, "ethernet", 12.5, 1)),
    ("v100", ("V100", 32.0, 125.0, "nvlink", 150.0, "infiniband", 12.5, 1)),  # no bf16: fp16 figure
    ("mi300", ("MI300X", 192.0, 1307.0, "pcie", 64.0, "roce", 400.0, 8)),
    ("mi250", ("MI250X", 128.0, 383.0, "pcie", 50.0, "roce", 100.0, 4)),
]
#: When the gres has no type: ClusterSpec's defaults, so a guess never looks like a fact.
UNKNOWN_GPU = ("unknown", 80.0, 100.0, "pcie", 32.0, "ethernet", 12.5, 1)

_KV_RE = re.compile(r"(\w+)=(.*?)(?=\s+\w+=|\s*$)")


def parse_kv_line(line: str) -> Dict[str, str]:
    """One ``scontrol show ... -o`` line -> {key: value}; values may contain spaces (``OS=``)."""
    return {m.group(1): m.group(2).strip() for m in _KV_RE.finditer(line.strip())}


def parse_gres(gres: str) -> Dict[str, Any]:
    """``"gpu:a100:4(S:0-1),nvme:1"`` -> {"count": 4, "type": "a100"}; no GPU gres -> count 0."""
    count, types = 0, []
    for item in re.split(r",(?![^()]*\))", gres or ""):
        item = re.sub(r"\(.*?\)", "", item).strip()
        parts = item.split(":")
        if not parts or parts[0] != "gpu":
            continue
        n = 1
        if len(parts) >= 2 and re.fullmatch(r"\d+[KMG]?", parts[-1]):
            n = _count(parts[-1])
            parts = parts[:-1]
        count += n
        if len(parts) >= 2 and parts[1]:
            types.append(parts[1])
    return {"count": count, "type": types[0] if types else None}


def _count(text: str) -> int:
    mult = {"K": 1024, "M": 1024 ** 2, "G": 1024 ** 3}
    return int(text[:-1]) * mult[text[-1]] if text[-1] in mult else int(text)


def normalize_time(value: Optional[str]) -> Optional[str]:
    """Slurm time limit (``02:00:00``, ``1-00:00:00``, ``30``) or None for UNLIMITED/INFINITE."""
    if not value or value.upper() in ("UNLIMITED", "INFINITE", "NONE", "N/A"):
        return None
    return value


def _gpu_facts(gres_type: Optional[str]) -> Tuple[Tuple[str, float, float, str, float, str, float, int], bool]:
    if gres_type:
        low = gres_type.lower().replace("-", "_")
        for key, facts in GPU_TABLE:
            if key in low:
                return facts, True
    return UNKNOWN_GPU, False


#: Slurm's MaxArraySize when slurm.conf does not set it.
DEFAULT_MAX_ARRAY_SIZE = 1001


def read_config(timeout: float = DEFAULT_TIMEOUT, host: Host = LOCAL) -> Dict[str, str]:
    """``scontrol show config`` as {key: value}."""
    config = {}
    for ln in run_slurm(["scontrol", "show", "config"], timeout=timeout, host=host).stdout.splitlines():
        if "=" in ln:
            k, _, v = ln.partition("=")
            config[k.strip()] = v.strip()
    return config


def array_size_of(config: Dict[str, str]) -> int:
    """The most tasks one job array may have (indices 0..MaxArraySize-1) per ``scontrol show config``."""
    value = config.get("MaxArraySize", "")
    return int(value) if is_digits(value) else DEFAULT_MAX_ARRAY_SIZE


def max_array_size(timeout: float = DEFAULT_TIMEOUT, host: Host = LOCAL) -> int:
    """The cluster's MaxArraySize, asked of ``scontrol show config`` on ``host``."""
    return array_size_of(read_config(timeout, host))


def partition_max_time(partition: Optional[str] = None, timeout: float = DEFAULT_TIMEOUT,
                       host: Host = LOCAL) -> Optional[str]:
    """The MaxTime of ``partition`` (default: the cluster's default partition) as Slurm writes
    it, or None when unlimited or unknown (``scontrol show partition`` on ``host``)."""
    parts = [parse_kv_line(ln) for ln in run_slurm(["scontrol", "show", "partition", "--oneliner"],
                                                  timeout=timeout, host=host).stdout.splitlines() if ln.strip()]
    wanted = [p for p in parts if (p.get("PartitionName") == partition if partition else p.get("Default") == "YES")]
    return normalize_time(wanted[0].get("MaxTime")) if wanted else None


def discover_cluster(partition: Optional[str] = None, *, name: Optional[str] = None,
                     timeout: float = DEFAULT_TIMEOUT, host: Host = LOCAL) -> Dict[str, Any]:
    """Describe ``partition`` (default: the cluster's default partition) as a cluster descriptor.

    Returns a plain dict with ClusterSpec's keys plus ``guessed`` (dotted keys that are not from
    Slurm) and ``observed`` (raw facts: node names, CPUs, memory, gres, features). Pass it to
    :func:`descriptor_yaml` for a file, or :func:`spec_fields` for ClusterSpec's keys only.
    ``host``: where scontrol runs (this machine by default).
    """
    parts = [parse_kv_line(ln) for ln in run_slurm(["scontrol", "show", "partition", "--oneliner"],
                                                  timeout=timeout, host=host).stdout.splitlines() if ln.strip()]
    if not parts:
        raise SporchError("Slurm reports no partitions (scontrol show partition)")
    names = [p.get("PartitionName", "") for p in parts]
    if partition is None:
        default = [p for p in parts if p.get("Default") == "YES"]
        if not default:
            raise SporchError(f"no default partition; pass one of: {', '.join(names)}")
        part = default[0]
    else:
        matches = [p for p in parts if p.get("PartitionName") == partition]
        if not matches:
            raise SporchError(f"unknown partition {partition!r}; partitions: {', '.join(names)}")
        part = matches[0]
    pname = part["PartitionName"]

    nodes = []
    for ln in run_slurm(["scontrol", "show", "node", "--oneliner"], timeout=timeout, host=host).stdout.splitlines():
        if not ln.strip():
            continue
        kv = parse_kv_line(ln)
        if pname in kv.get("Partitions", "").split(","):
            nodes.append(kv)
    if not nodes:
        raise SporchError(f"partition {pname!r} has no nodes")

    config = read_config(timeout, host)

    # a partition may mix node types: describe the most common one and say so
    def shape(n: Dict[str, str]) -> Tuple[int, int, str, str]:
        g = parse_gres(n.get("Gres", ""))
        return (int(n.get("CPUTot", n.get("CPUEfctv", "1")) or 1), int(n.get("RealMemory", "0") or 0),
                f"{g['type'] or ''}:{g['count']}", n.get("AvailableFeatures", "") or "")

    shapes = Counter(shape(n) for n in nodes)
    (cpus, mem_mb, gres_key, feats), _ = shapes.most_common(1)[0]
    gtype, gcount = gres_key.rsplit(":", 1)
    gtype = gtype or None
    gpus = int(gcount)
    features = [f for f in feats.split(",") if f and f != "(null)"]
    facts, known_gpu = _gpu_facts(gtype)
    model, mem_gib, tflops, intra_kind, intra_bw, inter_kind, inter_bw, nics = facts
    guessed = ["gpu.memory_gib", "gpu.bf16_tflops", "intra_node.fabric", "intra_node.gb_per_s",
               "inter_node.fabric", "inter_node.gb_per_s", "inter_node.nics_per_node"]
    if not known_gpu:
        guessed.insert(0, "gpu.model")
    low_feats = {f.lower() for f in features}
    if low_feats & {"ib", "infiniband", "hdr", "ndr", "edr"}:
        inter_kind = "infiniband"
    elif low_feats & {"roce"}:
        inter_kind = "roce"
    elif low_feats & {"nvlink"}:
        intra_kind = "nvlink"

    time_limit = normalize_time(part.get("MaxTime"))
    if time_limit is None:
        time_limit = normalize_time(part.get("DefaultTime")) or "01:00:00"
        guessed.append("slurm.time")
    warnings = []
    if len(shapes) > 1:
        warnings.append(f"partition mixes {len(shapes)} node types; described the most common one")
    if gpus == 0:
        warnings.append("no GPU gres on these nodes (gpus_per_node 0 will not validate)")

    cluster_name = name or config.get("ClusterName") or pname
    if name is None and pname != cluster_name:
        cluster_name = f"{cluster_name}-{pname}"
    node_names = [n.get("NodeName", "") for n in nodes]
    return {
        "name": cluster_name,
        "description": f"discovered from Slurm {config.get('SLURM_VERSION', '')} on "
                       f"{_dt.date.today().isoformat()}: partition {pname}, {len(nodes)} nodes".replace("  ", " "),
        "nodes": len(nodes),
        "gpus_per_node": gpus,
        "gpu": {"model": model if known_gpu else (gtype or "unknown"), "memory_gib": mem_gib, "bf16_tflops": tflops},
        "intra_node": {"fabric": intra_kind, "gb_per_s": intra_bw},
        "inter_node": {"fabric": inter_kind, "gb_per_s": inter_bw, "nics_per_node": nics},
        "slurm": {
            "partition": pname,
            "account": None,
            "qos": None,
            "constraint": None,
            "time": time_limit,
            "cpus_per_task": max(1, cpus // gpus) if gpus else max(1, cpus),
            "mem": None,
            "exclusive": True,
            "gpu_directive": "gpus-per-node",
            "extra": [],
            "max_array_size": array_size_of(config),
        },
        "env": {},
        "guessed": guessed,
        "observed": {
            "cluster_name": config.get("ClusterName"),
            "slurm_version": config.get("SLURM_VERSION"),
            "partition_default": part.get("Default") == "YES",
            "node_names": node_names,
            "cpus_per_node": cpus,
            "mem_mb_per_node": mem_mb,
            "gres_type": gtype,
            "features": features,
            "max_time": part.get("MaxTime"),
            "default_time": part.get("DefaultTime"),
            "warnings": warnings,
        },
    }


#: Keys of the descriptor that are not ClusterSpec fields.
EXTRA_KEYS = ("guessed", "observed")


def spec_fields(desc: Dict[str, Any]) -> Dict[str, Any]:
    """The descriptor without ``guessed``/``observed`` (what ClusterSpec accepts)."""
    return {k: v for k, v in desc.items() if k not in EXTRA_KEYS}


def _scalar(v: Any) -> str:
    if v is None:
        return "null"
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, (int, float)):
        return repr(v)
    s = str(v)
    if re.fullmatch(r"[A-Za-z_][\w.\-/]*", s) and s.lower() not in ("null", "true", "false", "yes", "no", "on", "off", "~"):
        return s
    return json.dumps(s)  # a JSON string is a valid YAML double-quoted scalar


def descriptor_yaml(desc: Dict[str, Any]) -> str:
    """YAML for ``clusters/<name>.yaml``; guessed values carry a ``# guessed`` comment."""
    guessed = set(desc.get("guessed", ()))
    obs = desc.get("observed", {})
    out = [f"# {desc.get('description', '')}",
           "# Values marked 'guessed' are not known to Slurm: check them against the hardware."]
    if obs.get("features"):
        out.append(f"# node features: {','.join(obs['features'])}")
    for w in obs.get("warnings", []):
        out.append(f"# WARNING: {w}")

    def emit(d: Dict[str, Any], indent: int, prefix: str) -> None:
        for k, v in d.items():
            key = f"{prefix}{k}"
            pad = "  " * indent
            if isinstance(v, dict):
                if v:
                    out.append(f"{pad}{k}:")
                    emit(v, indent + 1, key + ".")
                else:
                    out.append(f"{pad}{k}: {{}}")
            elif isinstance(v, list):
                out.append(f"{pad}{k}: [{', '.join(_scalar(x) for x in v)}]")
            else:
                note = "  # guessed" if key in guessed else ""
                out.append(f"{pad}{k}: {_scalar(v)}{note}")

    emit(spec_fields(desc), 0, "")
    return "\n".join(out) + "\n"
