"""A cluster's link figures as a preflight job measured them (``sporch calibrate --links``).

``sporch preflight`` (runtime/preflight.py) times, with the plan's own groups, an all-to-all in
every Ulysses group and every hop of every ring group, each with a large payload and with a
64-byte message (``latency_s``). This module turns those measurements into the figures the cost
model reads (plan/cost_terms.py, plan/estimates.py):

- ``intra_node_gb_per_s``: the median all-to-all inside one node, as the estimate counts it
  (each rank's ``(k - 1) / k`` of the payload), the latency taken off: ``bytes / (s - latency_s)``.
  No all-to-all in a node (Ulysses 1): the median ring hop inside a node.
- ``inter_node_gb_per_s``: the median ring hop between two nodes, per GPU, times GPUs per node
  (every ring's hop runs at once, so a node's GPUs share its NICs as a job's do); the descriptor
  writes the figure per node and the estimate divides it by GPUs per node again.
- ``a2a_latency_s``: the 64-byte all-to-all's time per peer (the model counts one latency per
  peer and call); ``p2p_latency_s``: the 64-byte ring hop's time (medians).

With measured rates, ``link_efficiency`` is 1: the measurement already holds what the links
deliver. A figure the preflight could not measure (one node: no hop between nodes; a preflight
from an older sporch: no latencies) is None and the descriptor's (or the fit's) value stays.
"""

from __future__ import annotations

import dataclasses
import json
import math
import statistics
from datetime import datetime, timezone
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Optional

from sporch.orchestrator.config.calibration_file import LINK_RATES
from sporch.orchestrator.contract.results import ResultFileError, read_bounded_text, result_file
from sporch.orchestrator.errors import SporchError



@dataclass(frozen=True)
class Figure:
    """One measured figure: its value and what it rests on (for the file and the printout)."""

    value: float
    measurements: int
    what: str


@dataclass(frozen=True)
class LinkFigures:
    cluster: str
    gpus_per_node: int
    nodes: int
    backend: str
    source: str  # the preflight's job folder
    intra_node_gb_per_s: Optional[Figure]
    inter_node_gb_per_s: Optional[Figure]
    a2a_latency_s: Optional[Figure]
    p2p_latency_s: Optional[Figure]
    measured_at: Optional[str] = None  # when the preflight finished, ISO 8601 UTC

    def rates(self) -> dict[str, float]:
        """The descriptor figures the measurement replaces (GB/s)."""
        return {k: f.value for k in LINK_RATES if (f := getattr(self, k)) is not None}

    def constants(self) -> dict[str, float]:
        """The cost model's constants the measurement sets: link_efficiency 1 (the rates are what
        the links deliver) where a rate was measured, and the latencies measured."""
        out = {"link_efficiency": 1.0} if self.rates() else {}
        for k in ("a2a_latency_s", "p2p_latency_s"):
            f = getattr(self, k)
            if f is not None:
                out[k] = f.value
        return out

    def figures(self) -> dict[str, Optional[Figure]]:
        return {k: getattr(self, k) for k in (*LINK_RATES, "a2a_latency_s", "p2p_latency_s")}


def _median(values: list[float]) -> Optional[float]:
    return statistics.median(values) if values else None


def _rate(m: dict[str, Any], moved: float) -> float:
    """GB/s of ``moved`` bytes in the measurement's time less its latency (where measured and
    smaller: a payload cannot move faster than its fixed cost allows)."""
    s, lat = float(m["s"]), m.get("latency_s")
    if isinstance(lat, (int, float)) and 0 < lat < s:
        s -= lat
    return moved / s / 1e9


def _number(m: dict[str, Any], key: str) -> bool:
    v = m.get(key)
    return isinstance(v, (int, float)) and not isinstance(v, bool) and v > 0


def from_preflight(data: dict[str, Any], *, cluster: str, gpus_per_node: int, source: str) -> LinkFigures:
    """The figures of one preflight's ``metrics.preflight`` (ranks and links)."""
    node_of = {r["rank"]: r["node"] for r in data.get("ranks") or [] if isinstance(r, dict) and "rank" in r}
    links = [m for m in data.get("links") or [] if isinstance(m, dict) and _number(m, "s") and _number(m, "bytes")]

    def nodes_of(ranks) -> set:
        return {node_of.get(r) for r in ranks}

    a2a = [m for m in links if m.get("kind") == "all_to_all" and len(nodes_of(m.get("group") or [])) == 1
           and len(m.get("group") or []) > 1]
    hops = [m for m in links if m.get("kind") == "ring_p2p"]
    hops_in = [m for m in hops if len(nodes_of([m.get("src"), m.get("dst")])) == 1]
    hops_out = [m for m in hops if len(nodes_of([m.get("src"), m.get("dst")])) == 2]

    intra = None
    if a2a:
        k = lambda m: len(m["group"])  # noqa: E731
        v = _median([_rate(m, (k(m) - 1) / k(m) * m["bytes"]) for m in a2a])
        intra = Figure(v, len(a2a), "median all-to-all inside a node, latency taken off")
    elif hops_in:
        intra = Figure(_median([_rate(m, m["bytes"]) for m in hops_in]), len(hops_in),
                       "median ring hop inside a node (no all-to-all measured), latency taken off")
    inter = None
    if hops_out:
        per_gpu = _median([_rate(m, m["bytes"]) for m in hops_out])
        inter = Figure(per_gpu * gpus_per_node, len(hops_out),
                       f"median ring hop between nodes ({per_gpu:.4g} GB/s per GPU) x {gpus_per_node} GPUs per node")
    a2a_lat = [m["latency_s"] / (len(m["group"]) - 1) for m in a2a if _number(m, "latency_s")]
    hop_lat = [m["latency_s"] for m in hops if _number(m, "latency_s")]
    return LinkFigures(
        cluster=cluster, gpus_per_node=gpus_per_node, nodes=len(set(node_of.values())),
        backend=str(data.get("backend") or "?"), source=source,
        intra_node_gb_per_s=intra, inter_node_gb_per_s=inter,
        a2a_latency_s=Figure(_median(a2a_lat), len(a2a_lat), "median 64-byte all-to-all per peer") if a2a_lat else None,
        p2p_latency_s=Figure(_median(hop_lat), len(hop_lat), "median 64-byte ring hop") if hop_lat else None)


def _read_json(path: Path, what: str) -> dict[str, Any]:
    try:
        doc = json.loads(read_bounded_text(path))
    except FileNotFoundError:
        raise SporchError(f"--links: {path} not found; give the folder of a `sporch preflight` job "
                          "(its result.json and plan.json)") from None
    except (ResultFileError, ValueError) as e:
        raise SporchError(f"--links: {what} {path} cannot be read ({' '.join(str(e).split())[:160]})") from None
    if not isinstance(doc, dict):
        raise SporchError(f"--links: {what} {path} is not a JSON object")
    return doc


def read_preflight(path: str | Path) -> LinkFigures:
    """The figures of the preflight job whose folder (or result.json) is ``path``; one-line
    errors for a folder that is not a completed preflight job."""
    p = Path(path).expanduser()
    folder = p if p.is_dir() else p.parent
    result = _read_json(result_file(folder), "result file")
    data = (result.get("metrics") or {}).get("preflight") if isinstance(result.get("metrics"), dict) else None
    if not isinstance(data, dict) or not isinstance(data.get("links"), list):
        raise SporchError(f"--links: {folder} is not a completed `sporch preflight` job (its result.json has no "
                          f"metrics.preflight; status {result.get('status')!r}); run `sporch preflight` and give its folder")
    plan = _read_json(folder / "plan.json", "plan")
    cluster = plan.get("cluster") if isinstance(plan.get("cluster"), dict) else {}
    gpn = plan.get("gpus_per_node") or cluster.get("gpus_per_node")
    if not isinstance(gpn, int) or gpn < 1:
        raise SporchError(f"--links: {folder}/plan.json has no gpus_per_node; is it a sporch job folder?")
    figures = from_preflight(data, cluster=str(cluster.get("name") or "?"), gpus_per_node=gpn, source=str(folder.resolve()))
    figures = dataclasses.replace(figures, measured_at=_finished_at(result, result_file(folder)))
    if not figures.rates():
        raise SporchError(f"--links: the preflight in {folder} measured no link (one rank per group); run it on "
                          "the nodes the jobs use")
    return figures


def _finished_at(result: dict[str, Any], path: Path) -> str:
    """When the preflight finished (its result's ``provenance.finished_at``, else the file's
    time), ISO 8601 UTC to the second."""
    prov = result.get("provenance") if isinstance(result.get("provenance"), dict) else {}
    t = prov.get("finished_at")
    if isinstance(t, bool) or not isinstance(t, (int, float)) or not math.isfinite(t) or not 0 <= t < 1e11:
        t = path.stat().st_mtime
    return datetime.fromtimestamp(t, tz=timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
