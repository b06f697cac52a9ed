"""Where the DiT's parameters live: ``parallel.shard_weights`` -> a PlacementSection.

``none`` keeps every parameter on every rank; ``sequence`` shards them (FSDP2, one unit per
block) over each replica's ring x ulysses ranks; ``world`` over every rank. ``auto`` (the
default) keeps the plain layout when its estimate fits in GPU memory, else takes the first of
sequence, world that fits, else world (the least memory) and the plan says it does not fit.
Pure: ``estimate_for(degree)`` is handed in and returns the estimate dict with ``fits`` and
``memory_bytes_per_gpu`` for that shard degree.
"""

from __future__ import annotations

from typing import Any, Callable

from sporch.orchestrator.contract.plan import Layout
from sporch.orchestrator.contract.sections import PlacementSection
from sporch.orchestrator.errors import SporchError

GIB = 1024**3
Estimate = dict[str, Any]


def shard_degree(mode: str, layout: Layout) -> int:
    """Ranks one copy of the parameters is spread over under ``mode``."""
    return {"none": 1, "sequence": layout.sequence_degree, "world": layout.world_size}[mode]


def choose_placement(mode: str, layout: Layout, estimate_for: Callable[[int], Estimate], *,
                     lockstep: bool = True) -> tuple[PlacementSection, Estimate]:
    """(placement, its estimate) for ``parallel.shard_weights`` = ``mode`` on ``layout``.

    ``lockstep``: every dp replica runs the same number of forwards (benchmark, verify,
    inference; not generate, where replicas run their own prompts): ``world`` needs it, since
    every rank takes part in every gather."""
    if mode == "world" and not lockstep and layout.dp > 1:
        raise SporchError(f"parallel.shard_weights=world needs every rank to run the same forwards, but the "
                          f"{layout.dp} dp replicas of a generate job run their own prompts: use "
                          "parallel.shard_weights=sequence (or auto)")
    if mode != "auto":
        degree = shard_degree(mode, layout)
        return _section(mode, degree, f"parallel.shard_weights: {mode}"), estimate_for(degree)
    plain = estimate_for(1)
    if plain["fits"]:
        return _section("none", 1, "auto: fits without sharding the parameters"), plain
    tried = [("none", 1, plain)]
    for mode_ in ("sequence", "world") if lockstep or layout.dp == 1 else ("sequence",):
        degree = shard_degree(mode_, layout)
        if degree <= tried[-1][1]:
            continue  # the same degree as the one before: nothing new
        est = estimate_for(degree)
        tried.append((mode_, degree, est))
        if est["fits"]:
            return _section(mode_, degree, _why(plain, mode_, degree, est, fits=True)), est
    mode_, degree, est = tried[-1]
    return _section(mode_, degree, _why(plain, mode_, degree, est, fits=False)), est


def _section(mode: str, degree: int, reason: str) -> PlacementSection:
    if degree <= 1:
        mode = "none"
    return PlacementSection(shard_weights=mode, shard_degree=degree, reason=reason)


def _why(plain: Estimate, mode: str, degree: int, est: Estimate, *, fits: bool) -> str:
    head = f"auto: {plain['memory_bytes_per_gpu'] / GIB:.1f} GiB per GPU unsharded does not fit"
    if degree <= 1:
        return f"{head}, and there is no other rank to shard the parameters over"
    where = "each replica's sequence ranks" if mode == "sequence" else "all ranks"
    tail = "" if fits else ", still too much"
    return f"{head}; parameters sharded over {where} ({degree}): {est['memory_bytes_per_gpu'] / GIB:.1f} GiB{tail}"
