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

VERSION_KEYS = ("python", "torch", "cuda", "nccl")


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
            out.append(f"{node}: sees {seen} GPU(s) for its {len(rs)} ranks (the descriptor says {gpus_per_node} per node)"
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
