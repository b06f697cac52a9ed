"""What every node must agree on before a job loads its weights (stdlib only).

Shared by ``sporch preflight``'s report (sporch.orchestrator.jobs.preflight_report) and the
quick check every job runs first (sporch.runtime.preflight.quick_check). ``ranks``: one dict per
rank with ``rank``, ``node``, ``gpus_visible`` (None: unknown), the versions of
:data:`VERSION_KEYS`, ``weights`` (``{path, readable, bytes, error}``) and ``lora`` (a list of
those, one per ``plan.model.lora`` file).
"""

from __future__ import annotations

from collections import Counter, defaultdict
from typing import Any

from sporch.orchestrator.contract.numbers import counted

VERSION_KEYS = ("python", "torch", "cuda", "nccl")
#: What else every node should have alike: the GPU model (torch's device name) and the driver.
HARDWARE_KEYS = ("gpu_model", "driver")
#: The variables a rank reports for :func:`environment_warnings` (when set).
ENV_KEYS = ("NCCL_P2P_DISABLE", "NCCL_IB_DISABLE", "NCCL_SOCKET_IFNAME", "GLOO_SOCKET_IFNAME")


def node_problems(ranks: list[dict[str, Any]], gpus_per_node: int, per_task: bool = False) -> list[str]:
    """One line per problem, naming the node: too few GPUs for its ranks (``per_task``: Slurm
    gives each rank its own GPU, so each must see at least one), the weights path
    unreadable, ranks of a node on other versions, a node whose versions or weights size differ
    from the others' (the most common value is the reference)."""
    by_node: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for r in sorted(ranks, key=lambda r: r["rank"]):
        by_node[r["node"]].append(r)
    out = []
    for node, rs in by_node.items():
        first = rs[0]
        seen = first.get("gpus_visible")
        need = 1 if per_task else len(rs)
        short = [r["rank"] for r in rs if r.get("gpus_visible") is not None and r["gpus_visible"] < need]
        if short:
            out.append(f"{node}: sees {counted(seen, 'GPU')} for its {counted(len(rs), 'rank')} (the descriptor says {gpus_per_node} per node)"
                       + (f"; ranks {short} see none" if per_task else ""))
        w = first.get("weights") or {}
        if w.get("path") and not w.get("readable"):
            out.append(f"{node}: the weights path {w['path']} {w.get('error', 'is not readable')}")
        for lw in first.get("lora") or []:
            if lw.get("path") and not lw.get("readable"):
                out.append(f"{node}: the LoRA file {lw['path']} {lw.get('error', 'is not readable')}")
        differing = [r["rank"] for r in rs if any(r.get(k) != first.get(k) for k in VERSION_KEYS)]
        if differing:
            out.append(f"{node}: ranks {differing} run other versions than rank {first['rank']} on the same node")
    firsts = {node: rs[0] for node, rs in by_node.items()}
    for key in VERSION_KEYS:
        counts = Counter(r.get(key) for r in firsts.values())
        if len(counts) > 1:
            usual = counts.most_common(1)[0][0]
            odd = [f"{node} ({r.get(key)})" for node, r in firsts.items() if r.get(key) != usual]
            out.append(f"{key} differs: {', '.join(odd)} against {usual} on the other nodes")
    readable = {node: (r.get("weights") or {}) for node, r in firsts.items() if (r.get("weights") or {}).get("readable")}
    sizes = Counter(w.get("bytes") for w in readable.values())
    if len(sizes) > 1:
        usual = sizes.most_common(1)[0][0]
        odd = [f"{node} ({w.get('bytes')} bytes)" for node, w in readable.items() if w.get("bytes") != usual]
        out.append(f"the weights differ in size: {', '.join(odd)} against {usual} bytes elsewhere")
    return out


def _set(value: Any) -> bool:
    """An NCCL boolean variable that is on: set, and not 0 / false / empty."""
    return value is not None and str(value).strip().lower() not in ("", "0", "false", "no", "off")


def missing_interfaces(spec: str, interfaces: list[str]) -> list[str]:
    """The entries of an NCCL/Gloo socket-interface list (``eth0``, ``ib,eth``, ``=eth0``) that
    match none of ``interfaces``: NCCL takes each entry as a prefix, ``=`` as an exact name, and
    ``^`` excludes (an exclusion names nothing the node must have)."""
    if spec.startswith("^"):
        return []
    exact = spec.startswith("=")
    wanted = [w.strip() for w in spec.lstrip("=").split(",") if w.strip()]
    return [w for w in wanted if not any((i == w) if exact else i.startswith(w) for i in interfaces)]


def environment_warnings(ranks: list[dict[str, Any]], intra_fabric: str, inter_fabric: str,
                         links: list[dict[str, Any]] = ()) -> list[str]:
    """One line per setting that makes a multi-node run slower than its hardware allows, naming
    the nodes: nodes differing in GPU model or driver (:data:`HARDWARE_KEYS`), NCCL_P2P_DISABLE on NVLink nodes (with the all-to-all measured in a node, where
    ``links`` has it), NCCL_IB_DISABLE on an InfiniBand cluster, a socket interface
    (NCCL_SOCKET_IFNAME, GLOO_SOCKET_IFNAME) a node does not have. A rank reports ``env`` (the
    :data:`ENV_KEYS` set) and ``interfaces`` (its network interfaces' names)."""
    by_node: dict[str, dict[str, Any]] = {}
    for r in sorted(ranks, key=lambda r: r["rank"]):
        by_node.setdefault(r["node"], r)
    out = []
    node_of = {r["rank"]: r["node"] for r in ranks}
    for key in HARDWARE_KEYS:  # a warning, not a problem: a mixed cluster may be meant
        counts = Counter(r.get(key) for r in by_node.values())
        if len(counts) > 1:
            usual = counts.most_common(1)[0][0]
            odd = [f"{node} ({r.get(key)})" for node, r in by_node.items() if r.get(key) != usual]
            out.append(f"{key} differs: {', '.join(odd)} against {usual} on the other nodes: "
                       "the slowest sets the pace of every collective")

    def nodes_where(pred) -> list[str]:
        return [n for n, r in by_node.items() if pred(r.get("env") or {}, r)]

    p2p = nodes_where(lambda env, r: _set(env.get("NCCL_P2P_DISABLE")))
    if p2p and intra_fabric == "nvlink":
        a2a = [m["gb_per_s"] for m in links if m.get("kind") == "all_to_all" and m.get("gb_per_s")
               and len({node_of.get(x) for x in m.get("group", [])}) == 1]
        cost = f"; measured all-to-all in a node: median {sorted(a2a)[len(a2a) // 2]:.3g} GB/s per rank" if a2a else ""
        out.append(f"NCCL_P2P_DISABLE is set on {', '.join(p2p)}, whose GPUs the descriptor says talk over NVLink: "
                   f"NCCL sends through host memory instead{cost}; unset it")
    ib = nodes_where(lambda env, r: _set(env.get("NCCL_IB_DISABLE")))
    if ib and inter_fabric == "infiniband" and len(by_node) > 1:
        out.append(f"NCCL_IB_DISABLE is set on {', '.join(ib)} of an InfiniBand cluster: NCCL falls back to TCP "
                   "sockets between nodes; unset it (or set 0)")
    for key in ("NCCL_SOCKET_IFNAME", "GLOO_SOCKET_IFNAME"):
        for node, r in by_node.items():
            spec = (r.get("env") or {}).get(key)
            interfaces = r.get("interfaces")
            if not spec or interfaces is None:
                continue
            missing = missing_interfaces(str(spec), list(interfaces))
            if missing:
                out.append(f"{key}={spec} on {node}, which has no interface {', '.join(missing)} "
                           f"(it has {', '.join(sorted(interfaces)) or 'none'}): the collectives cannot bind; "
                           "name one it has")
    return out
