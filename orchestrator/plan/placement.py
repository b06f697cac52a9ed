"""Where the parameters, the text encoder and the VAE live -> a PlacementSection.

``parallel.shard_weights``: ``none`` keeps every DiT parameter on every rank; ``sequence`` shards
them (FSDP2, one unit per block) over each replica's ring x ulysses ranks; ``world`` over every
rank. A generate job also places its text encoder (``pipeline.text_encoder``: leader, sharded
over the sequence group, or on the leader's cpu) and its VAE (``pipeline.vae``: leader, tiled,
or parallel over the sequence group). A generate job of a two-expert model (Wan2.2 A14B) places
its experts (``pipeline.experts``: both resident on the GPU, or the idle one offloaded to host
memory and moved in at the switch).

``auto`` (the default of each) keeps the plain placement when its estimate fits in GPU memory.
Otherwise it tries the combinations of the ``auto`` settings cheapest first, by what each costs
in time (:data:`COST`: a parallel decode is faster than the plain one, a sharded encoder costs a
few gathers once per prompt, sharded DiT parameters cost gathers at every step, a tiled decode
recomputes the overlaps, an encoder on the CPU is slow), and takes the first that fits; if none
fits, the one that needs the least memory, and the plan says it does not fit.

Pure: ``estimate_for(shard_degree, text_encoder, vae, experts)`` is handed in and returns the
placement's Estimates (``memory.fits``, ``memory.memory_bytes_per_gpu``).
"""

from __future__ import annotations

import itertools
from dataclasses import replace
from typing import Callable, Mapping, Optional

from sporch.orchestrator.contract.estimates_section import Estimates, MemoryOption
from sporch.orchestrator.contract.plan import Layout
from sporch.orchestrator.contract.sections import PlacementSection
from sporch.orchestrator.errors import SporchError

GIB = 1024**3
EstimateFor = Callable[[int, str, str, str], Estimates]

#: The relative time cost of each option (0 = the plain placement); combinations are tried in
#: order of their sum.
COST: dict[str, dict[str, int]] = {
    "shard_weights": {"none": 0, "sequence": 2, "world": 3},
    "text_encoder": {"leader": 0, "sharded": 1, "cpu": 3},
    "vae": {"leader": 0, "parallel": 1, "tiled": 2},
    # one host -> GPU copy of an expert per switch, not a gather per step: cheaper than sharding
    "experts": {"resident": 0, "offload": 1},
}
PLAIN = {"shard_weights": "none", "text_encoder": "leader", "vae": "leader", "experts": "resident"}


def shard_degree(mode: str, layout: Layout) -> int:
    """Ranks one copy of the parameters is spread over under ``mode``."""
    return {"none": 1, "sequence": layout.sequence_degree, "world": layout.world_size}[mode]


def choose_placement(modes: dict[str, str], layout: Layout, estimate_for: EstimateFor, *,
                     lockstep: bool = True, cfg_lockstep: bool = True, generate: bool = False, experts: bool = False,
                     choices: Optional[Mapping[str, tuple[str, ...]]] = None) -> tuple[PlacementSection, Estimates]:
    """(placement, its estimate) for the settings ``modes`` (shard_weights, text_encoder, vae,
    experts: an option or ``auto``) on ``layout``. ``generate``: the job has a text encoder and a
    VAE to place (otherwise both stay ``leader``); ``experts``: and two experts (otherwise
    ``resident``).

    ``lockstep``: every dp replica runs the same number of forwards (benchmark, verify,
    inference; not generate, where replicas run their own prompts): ``world`` needs it, since
    every rank takes part in every gather. ``cfg_lockstep``: the cfg ranks of a replica run each
    forward together (False: a generate whose pipeline's two CFG calls per step run one on
    each cfg rank, at different times, runtime/models/cfg_two_calls.py): ``world`` needs that
    too with ``parallel.cfg=2``.

    ``choices``: the only options ``auto`` may try for some keys (the one model path's generate runs
    its text encoders on the leader or its CPU and decodes on the leader, in parallel over the leader's
    sequence group where the family's VAE decodes exactly by rows, or in tiles where it has a tiled
    decode: family_checks.generate_placements)."""
    if modes["shard_weights"] == "world" and not lockstep and layout.dp > 1:
        raise SporchError(f"parallel.shard_weights=world needs every rank to run the same forwards, but the "
                          f"{layout.dp} dp replicas of a generate job run their own prompts: use "
                          "parallel.shard_weights=sequence (or auto)")
    if modes["shard_weights"] == "world" and not cfg_lockstep and layout.cfg > 1:
        raise SporchError("parallel.shard_weights=world needs every rank to run the same forwards, but with "
                          f"parallel.cfg={layout.cfg} this pipeline's two CFG calls per step run one on each cfg rank, "
                          "at different times: use parallel.shard_weights=sequence (or auto)")
    world = (lockstep or layout.dp == 1) and (cfg_lockstep or layout.cfg == 1)
    options = {key: _options(key, modes.get(key, "auto"), layout, world, generate, experts) for key in COST}
    for key, allowed in (choices or {}).items():
        options[key] = [o for o in options[key] if o in allowed] or options[key]
    # the cheapest combination is each setting's cheapest option: when it fits (most plans), the
    # others are never built
    cheapest = {k: min(options[k], key=COST[k].__getitem__) for k in COST}
    first = estimate_for(shard_degree(cheapest["shard_weights"], layout), cheapest["text_encoder"], cheapest["vae"],
                         cheapest["experts"])
    if first.memory.fits:
        return _section(cheapest, layout, _why(modes, (cheapest, first), (cheapest, first), layout, generate,
                                               experts)), first
    combos = sorted((dict(zip(COST, c)) for c in itertools.product(*options.values())),
                    key=lambda c: (sum(COST[k][v] for k, v in c.items()), *(COST[k][c[k]] for k in COST)))
    tried: list[tuple[dict[str, str], Estimates]] = [(cheapest, first)]
    for combo in (c for c in combos if c != cheapest):
        est = estimate_for(shard_degree(combo["shard_weights"], layout), combo["text_encoder"], combo["vae"],
                           combo["experts"])
        tried.append((combo, est))
        if est.memory.fits:
            break
    combo, est = tried[-1] if tried[-1][1].memory.fits else min(tried, key=lambda t: t[1].memory.memory_bytes_per_gpu)
    reason = _why(modes, tried[0], (combo, est), layout, generate, experts)
    if len(tried) > 1:
        est = replace(est, memory=replace(est.memory, memory_options=tuple(_option_row(c, e) for c, e in tried)))
    return _section(combo, layout, reason), est


def _options(key: str, mode: str, layout: Layout, world: bool, generate: bool, experts: bool) -> list[str]:
    """The options ``auto`` may try for ``key`` (or the one the job names); ``world``: every rank
    runs the same forwards together, so ``world`` sharding is among them."""
    if key == "experts":
        return (["resident", "offload"] if mode == "auto" else [mode]) if generate and experts else ["resident"]
    if key != "shard_weights" and not generate:
        return ["leader"]
    if mode != "auto":
        return [mode]
    if key == "shard_weights":
        modes = ["none", "sequence"] + (["world"] if world else [])
        out: list[str] = []
        for m in modes:  # a degree no bigger than the one before it adds nothing
            if not out or shard_degree(m, layout) > shard_degree(out[-1], layout):
                out.append(m)
        return out
    spread = layout.sequence_degree > 1
    if key == "text_encoder":
        return ["leader"] + (["sharded"] if spread else []) + ["cpu"]
    return ["leader"] + (["parallel"] if spread else []) + ["tiled"]


def _section(combo: dict[str, str], layout: Layout, reason: str) -> PlacementSection:
    degree = shard_degree(combo["shard_weights"], layout)
    spread = layout.sequence_degree
    text = "leader" if combo["text_encoder"] == "sharded" and spread <= 1 else combo["text_encoder"]
    vae = "leader" if combo["vae"] == "parallel" and spread <= 1 else combo["vae"]
    return PlacementSection(shard_weights=combo["shard_weights"] if degree > 1 else "none", shard_degree=degree,
                            reason=reason, text_encoder=text, vae=vae,
                            pipeline_degree=spread if "sharded" == text or "parallel" == vae else 1,
                            experts=combo["experts"])


def _option_row(combo: dict[str, str], est: Estimates) -> MemoryOption:
    return MemoryOption(**combo, memory_gib_per_gpu=est.memory.memory_gib_per_gpu, fits=bool(est.memory.fits))


def _what(key: str, value: str, layout: Layout) -> str:
    """One option in words."""
    if key == "shard_weights":
        where = ("each replica's sequence ranks" if value == "sequence" else "all ranks")
        return f"parameters sharded over {where} ({shard_degree(value, layout)})"
    if key == "experts":
        return {"offload": "the idle expert in host memory", "resident": "both experts on the GPU"}[value]
    if key == "text_encoder":
        return {"sharded": f"text encoder sharded over each sequence group ({layout.sequence_degree})",
                "cpu": "text encoder on the leader's CPU", "leader": "text encoder on the leader"}[value]
    return {"parallel": f"VAE decode split over the leader's sequence group ({layout.sequence_degree})",
            "tiled": "VAE decoded in tiles", "leader": "VAE on the leader"}[value]


def _why(modes: dict[str, str], first: tuple[dict[str, str], Estimates], chosen: tuple[dict[str, str], Estimates],
         layout: Layout, generate: bool, experts: bool = False) -> str:
    keys = [k for k in COST if (generate and (k != "experts" or experts)) or k == "shard_weights"]
    auto = [k for k in keys if modes.get(k, "auto") == "auto"]
    if not auto:
        return "; ".join(f"{'parallel' if k == 'shard_weights' else 'pipeline'}.{k}: {modes[k]}" for k in keys)
    (combo0, plain), (combo, est) = first, chosen
    fixed = [_what(k, combo0[k], layout) for k in keys if combo0[k] != PLAIN[k]]
    if plain.memory.fits:
        rest = ", text encoder and VAE on the leader" if generate and not fixed else ""
        return "auto: fits without sharding the parameters" + rest if not fixed else f"auto: fits with {', '.join(fixed)}"
    start = "unsharded" if not fixed else f"with {', '.join(fixed)}"
    head = f"auto: {plain.memory.memory_bytes_per_gpu / GIB:.1f} GiB per GPU {start} does not fit"
    changed = [_what(k, combo[k], layout) for k in auto if combo[k] != combo0[k]]
    if not changed:
        return f"{head}, and there is no other rank to shard the parameters over"
    tail = "" if est.memory.fits else ", still too much"
    return f"{head}; {', '.join(changed)}: {est.memory.memory_bytes_per_gpu / GIB:.1f} GiB{tail}"
