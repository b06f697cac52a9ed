"""Judging a preflight job's measurements (``metrics.preflight``, runtime/preflight.py): pure.

Per node: the GPUs it sees against the descriptor, its Python/torch/CUDA/NCCL versions against
the other nodes' (the most common value is the reference), the weights path readable and the
same size everywhere. Per link: each node's score is the median bandwidth of the measurements
that touch it (its Ulysses all-to-all, the ring hops into and out of it); a node whose score is
below ``threshold`` times the median of the other nodes' scores is named, and so is a ring hop
below ``threshold`` times the median hop. Against the descriptor (``intra_node.gb_per_s`` for
an all-to-all inside a node, the inter-node bandwidth per GPU for a hop between nodes) only on
NCCL: gloo on CPUs says nothing about the fabric.
"""

from __future__ import annotations

import statistics
from collections import defaultdict
from dataclasses import dataclass, field
from typing import Any, Optional

from sporch.orchestrator.contract.numbers import counted
from sporch.orchestrator.contract.preflight_checks import VERSION_KEYS, environment_warnings, node_problems

DEFAULT_THRESHOLD = 0.5


@dataclass
class NodeRow:
    node: str
    ranks: list[int]
    gpus_visible: Optional[int]
    gpus_expected: int
    versions: dict[str, Optional[str]]
    host_available_bytes: Optional[int]
    weights: dict[str, Any]
    score_gb_per_s: Optional[float] = None


@dataclass
class LinkRow:
    kind: str
    ranks: str  # "0->2" or "[0, 1]"
    nodes: str
    gb_per_s: Optional[float]
    vs_peers: Optional[float]
    descriptor_gb_per_s: Optional[float]
    vs_descriptor: Optional[float]


@dataclass
class Report:
    nodes: list[NodeRow]
    links: list[LinkRow]
    problems: list[str] = field(default_factory=list)
    #: settings that slow a run without stopping it (contract.preflight_checks.environment_warnings)
    warnings: list[str] = field(default_factory=list)
    slowest_node: Optional[str] = None
    slowest_link: Optional[str] = None


def _median(values: list[float]) -> Optional[float]:
    return statistics.median(values) if values else None


def judge(data: dict[str, Any], *, gpus_per_node: int, intra_gb_per_s: float, inter_gb_per_s: float,
          threshold: float = DEFAULT_THRESHOLD, per_task: bool = False, intra_fabric: str = "",
          inter_fabric: str = "") -> Report:
    """The report of one preflight's ``metrics.preflight`` on a cluster with those figures."""
    ranks = sorted(data["ranks"], key=lambda r: r["rank"])
    node_of = {r["rank"]: r["node"] for r in ranks}
    by_node: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for r in ranks:
        by_node[r["node"]].append(r)
    nodes = [NodeRow(node=n, ranks=[r["rank"] for r in rs], gpus_visible=rs[0].get("gpus_visible"),
                     gpus_expected=gpus_per_node, versions={k: rs[0].get(k) for k in VERSION_KEYS},
                     host_available_bytes=rs[0].get("host_available_bytes"), weights=rs[0].get("weights") or {})
             for n, rs in by_node.items()]
    problems = node_problems(ranks, gpus_per_node, per_task)
    nccl = data.get("backend") == "nccl"
    per_gpu_inter = inter_gb_per_s / max(1, gpus_per_node)
    links, touching = [], defaultdict(list)
    hop_bw = []
    for m in data["links"]:
        bw = m.get("gb_per_s")
        if m["kind"] == "all_reduce":
            if m["rank"] != 0:
                continue  # one row for the world
            links.append(LinkRow("all_reduce", f"world ({len(m['group'])})", counted(len(nodes), "node"), bw, None, None,
                                 None))
            continue
        if m["kind"] == "all_to_all":
            if m["rank"] != m["group"][0]:
                continue  # one row per group
            where = sorted({node_of[r] for r in m["group"]})
            desc = intra_gb_per_s if len(where) == 1 else per_gpu_inter
            row_nodes, label = where, str(m["group"])
        else:  # ring_p2p, reported by the receiver
            where = sorted({node_of[m["src"]], node_of[m["dst"]]})
            desc = intra_gb_per_s if len(where) == 1 else per_gpu_inter
            row_nodes, label = where, f"{m['src']}->{m['dst']}"
            if bw:
                hop_bw.append(bw)
        if bw:
            for n in row_nodes:
                touching[n].append(bw)
        links.append(LinkRow(m["kind"], label, ", ".join(row_nodes), bw, None, desc if nccl else None,
                             (bw / desc) if nccl and bw and desc else None))
    for row in nodes:
        row.score_gb_per_s = _median(touching.get(row.node, []))
    report = Report(nodes=nodes, links=links, problems=problems,
                    warnings=environment_warnings(ranks, intra_fabric, inter_fabric, data["links"]))
    _judge_speed(report, hop_bw, threshold)
    for link in links:
        if link.vs_descriptor is not None and link.vs_descriptor < threshold:
            report.problems.append(f"{link.kind} {link.ranks} on {link.nodes}: {link.gb_per_s:.3g} GB/s, "
                                   f"{link.vs_descriptor:.0%} of the descriptor's {link.descriptor_gb_per_s:g} GB/s")
    return report


def _judge_speed(report: Report, hop_bw: list[float], threshold: float) -> None:
    scored = [row for row in report.nodes if row.score_gb_per_s]
    if len(scored) > 1:
        slow = min(scored, key=lambda row: row.score_gb_per_s)
        peers = _median([row.score_gb_per_s for row in scored if row is not slow])
        if peers and slow.score_gb_per_s < threshold * peers:
            report.slowest_node = slow.node
            report.problems.append(
                f"slowest node: {slow.node}, {slow.score_gb_per_s:.3g} GB/s on its links, "
                f"{peers / slow.score_gb_per_s:.1f}x below the median of the other nodes ({peers:.3g} GB/s)")
    for link in report.links:
        if link.kind != "all_reduce" and link.gb_per_s:
            peers = _median([x.gb_per_s for x in report.links if x.kind == link.kind and x is not link and x.gb_per_s])
            link.vs_peers = link.gb_per_s / peers if peers else None
    hops = [x for x in report.links if x.kind == "ring_p2p" and x.gb_per_s]
    if len(hops) > 1:
        worst = min(hops, key=lambda x: x.gb_per_s)
        median = _median(hop_bw)
        if median and worst.gb_per_s < threshold * median:
            report.slowest_link = f"{worst.ranks} ({worst.nodes})"
            report.problems.append(f"slowest link: ring hop {worst.ranks} between {worst.nodes}, "
                                   f"{worst.gb_per_s:.3g} GB/s against a median hop of {median:.3g} GB/s")
