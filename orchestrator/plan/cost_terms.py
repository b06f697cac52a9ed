"""The cost model's terms per layer (docs/plan.md; the formulas: plan/cost.py's docstring) and the
counts they rest on: the attention's and the GEMMs' occupancy, the host's launches, the ring merge's
elements.
:func:`.cost.predict` combines them into times, :func:`.cost_features.features` into the linear
form calibration fits."""

from __future__ import annotations

import math
from typing import Mapping

from sporch.orchestrator.plan.cost_inputs import CostInputs

A2A_CALLS_PER_LAYER = 2  # q/k/v in, output back (runtime/attention/ulysses.py)
TILE_ROWS = 128
#: A GEMM's output tile (rows x columns) on one SM: cuBLAS's and CUTLASS's usual 128 x 128 for bf16.
GEMM_TILE = 128
#: Constants that enter the model as 1 / value (rates: efficiencies); the others enter as they are (costs).
INVERSE = ("gemm_efficiency", "attention_efficiency", "link_efficiency", "encode_efficiency")


def occupancy(x: CostInputs, parallel_units: float) -> float:
    tiles = x.samples * x.q_heads_max * math.ceil(x.seq_total / x.ring / TILE_ROWS)
    return min(1.0, tiles / max(parallel_units, 1.0))


def gemm_occupancy(x: CostInputs, parallel_units: float) -> float:
    """Of the SMs, the share a layer's narrowest GEMM (hidden outputs) keeps busy: one 128 x 128
    output tile per SM, rows = this rank's tokens x samples. Few tokens per rank (a small image
    over many GPUs) leave SMs idle; a long video's share fills them (1)."""
    rows = x.samples * x.tokens_rank
    tiles = math.ceil(rows / GEMM_TILE) * math.ceil(x.hidden / GEMM_TILE)
    return min(1.0, tiles / max(parallel_units, 1.0))


def layer_terms(x: CostInputs, c: Mapping[str, float]) -> dict[str, float]:
    """Seconds per layer of each term (ring: per transfer and per block, not yet combined)."""
    L = x.layers
    occ = occupancy(x, c["parallel_units"])
    t = {
        "gemm": x.gemm_flops / L / (x.peak_flops * c["gemm_efficiency"] * gemm_occupancy(x, c["parallel_units"])),
        "attention": x.attention_flops / L / (x.peak_flops * c["attention_efficiency"] * occ),
        "elementwise": x.samples * x.tokens_rank * x.hidden * _elementwise_bytes(x, c) / (c["hbm_gb_per_s"] * 1e9),
        "all_to_all": (x.a2a_bytes / (x.a2a_bw * c["link_efficiency"]) + a2a_messages(x) * c["a2a_latency_s"]
                       if x.ulysses > 1 else 0.0),
        "overhead": c["layer_overhead_s"],
        "host": sum(n * c[k] for k, n in host_counts(x).items()),
        "gather": x.gather_bytes / L / (x.gather_bw * c["link_efficiency"]),
    }
    t["ring_merge"] = 0.0
    if x.ring > 1:
        t["ring_merge"] = (x.ring - 1) * (merge_elements(x) * c["ring_merge_bytes"] / (c["hbm_gb_per_s"] * 1e9)
                                          + c["ring_step_s"] + eager_ring_step(x) * c["eager_ring_step_s"])
        t["ring_transfer"] = x.ring_bytes / (x.ring - 1) / (x.ring_bw * c["link_efficiency"]) + c["p2p_latency_s"]
        t["ring_block"] = (t["attention"] + t["ring_merge"]) / x.ring
    return t


def host_counts(x: CostInputs) -> dict[str, float]:
    """An eager layer's host time as counts of the host constants (compiled or sharded: none).
    Per all-to-all message (peer and call): c10d's all_to_all_single enqueues one send and one
    receive per peer on the host. Counted per call instead, the held-out tables came out no better
    with issue 416's table in (docs/plan.md)."""
    if x.compiled or x.gather_bytes > 0:
        return {}
    return {"eager_layer_s": 1.0, "eager_a2a_message_s": float(a2a_messages(x)),
            "eager_ring_layer_s": 1.0 if x.ring > 1 else 0.0}


def eager_ring_step(x: CostInputs) -> float:
    """1 where a ring step's eager cost applies (blocks not compiled), else 0."""
    return 0.0 if x.compiled else 1.0


def layer_compute(t: Mapping[str, float]) -> float:
    """A layer's compute: what a prefetched weight gather hides behind."""
    return t["gemm"] + t["attention"] + t["elementwise"]


def a2a_messages(x: CostInputs) -> int:
    """Messages of one layer's all-to-alls on one rank: one per peer and call."""
    return A2A_CALLS_PER_LAYER * (x.ulysses - 1)


def elementwise_key(x: CostInputs) -> str:
    return "compiled_elementwise_bytes" if x.compiled else "elementwise_bytes"


def _elementwise_bytes(x: CostInputs, c: Mapping[str, float]) -> float:
    return c[elementwise_key(x)]


def merge_elements(x: CostInputs) -> float:
    """Output elements one ring merge reads and writes (per layer, this rank)."""
    return x.samples * (x.seq_total / x.ring) * x.q_heads_max * x.head_dim
