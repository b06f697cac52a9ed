"""Parallel layouts: enumerate (dp, cfg, ring, ulysses) on a cluster, validate, fill ``auto``.

Like torchtitan's ParallelDims: every check has an explicit, one-line message that names
the numbers and the fix. Rejections list every feasible layout on that cluster.
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass
from typing import Callable, Optional, Union

from sporch.orchestrator.errors import SporchError
from sporch.orchestrator.contract.parallel import DIMS, head_split, kv_mode, padded_length, sequence_chunks
from sporch.orchestrator.contract.plan import Layout
from sporch.orchestrator.contract.numbers import counted

#: How many feasible layouts an error message lists before "(+N more)".
MAX_LISTED = 40


class LayoutError(SporchError):
    """An infeasible layout. ``feasible`` holds every layout that would be accepted."""

    def __init__(self, message: str, feasible: list[Layout]):
        super().__init__(message)
        self.feasible = feasible


@dataclass(frozen=True)
class LayoutContext:
    """What layout validity depends on (cluster shape + the few model/workload numbers)."""

    cluster: str
    nodes: int
    gpus_per_node: int
    num_heads: int
    num_kv_heads: int
    batch: int
    guidance: bool  # classifier-free guidance on (guidance_scale > 1 and the model has a CFG branch)
    seq_len: int
    distilled: Optional[str] = None  # the model's name when it is guidance-distilled (no CFG branch)
    split: str = "padded"  # how the sequence is cut (vocab.SEQUENCE_SPLITS; plan.sequence.split)

    @property
    def world_size(self) -> int:
        return self.nodes * self.gpus_per_node

    def cluster_text(self) -> str:
        return f"{self.cluster} has {counted(self.nodes, 'node')} x {counted(self.gpus_per_node, 'GPU')} = {self.world_size}"


# -- small helpers ------------------------------------------------------------------------
def divisors(n: int) -> list[int]:
    """Sorted divisors of ``n``, found in pairs up to its square root."""
    low = [d for d in range(1, math.isqrt(n) + 1) if n % d == 0]
    return low + [n // d for d in reversed(low) if d * d != n]


@functools.lru_cache(maxsize=64)
def factorizations(world: int) -> tuple[Layout, ...]:
    """Every Layout with ``world_size == world``, sorted by (dp, cfg, ring, ulysses); made once per
    world size (Layouts are frozen: the tuple is shared)."""
    out = []
    for dp in divisors(world):
        for cfg in divisors(world // dp):
            for ring in divisors(world // dp // cfg):
                out.append(Layout(dp=dp, cfg=cfg, ring=ring, ulysses=world // dp // cfg // ring))
    return tuple(out)


def compact(layout: Layout) -> str:
    """``dpxcfgxringxulysses``: :attr:`Layout.name <sporch.orchestrator.contract.plan.Layout.name>`."""
    return layout.name


def short(layout: Layout) -> str:
    """``ulysses 8 x ring 2`` (only dims > 1, inner first; ``ulysses 1`` for a world of 1)."""
    parts = [f"{d} {getattr(layout, d)}" for d in reversed(DIMS) if getattr(layout, d) > 1]
    return " x ".join(parts) or "ulysses 1"


# -- checks ---------------------------------------------------------------------------------
def check_errors(ctx: LayoutContext, lay: Layout) -> list[str]:
    """Every reason ``lay`` is refused on ``ctx`` (empty when accepted)."""
    errs: list[str] = []
    if lay.world_size != ctx.world_size:
        errs.append(
            f"{short(lay)} = {lay.world_size} ranks, but {ctx.cluster_text()}; "
            f"make the product {ctx.world_size} or set a dim to auto (e.g. parallel.ring=auto)"
        )
    if lay.cfg not in (1, 2):
        errs.append(f"cfg {lay.cfg}: CFG parallelism splits the two guidance branches, so cfg must be 1 or 2")
    elif lay.cfg == 2 and ctx.distilled:
        errs.append(
            f"cfg 2: {ctx.distilled} is guidance-distilled (one transformer pass per step, guidance_scale is "
            "an input, no classifier-free-guidance branch to split); set parallel.cfg=1"
        )
    elif lay.cfg == 2 and not ctx.guidance:
        errs.append(
            "cfg 2 needs classifier-free guidance, but workload.guidance_scale <= 1 (CFG off); "
            "set workload.guidance_scale > 1 or parallel.cfg=1"
        )
    if ctx.batch % lay.dp:
        errs.append(
            f"dp {lay.dp} does not divide the global batch {ctx.batch}; "
            f"set workload.batch to a multiple of {lay.dp} or lower parallel.dp"
        )
    H, KV, U = ctx.num_heads, ctx.num_kv_heads, lay.ulysses
    if U > H:
        errs.append(
            f"ulysses {U} > num_heads {H}: a Ulysses rank would get no attention head; use ulysses <= {H}"
        )
    else:
        mode = kv_mode(H, KV, U)
        if mode is None:
            errs.append(
                f"num_kv_heads {KV} and ulysses {U}: neither divides the other, so kv heads can be neither "
                f"split nor replicated; use ulysses dividing {KV} or a multiple of it"
            )
        elif mode != "follow" and H % U:
            errs.append(
                f"ulysses {U} splits {H} query heads unevenly, which grouped kv heads ({KV}) do not support; "
                f"use a ulysses that divides {H}"
            )
    degree = lay.ring * lay.ulysses
    if ctx.seq_len < degree:
        errs.append(
            f"sequence of {ctx.seq_len} tokens < ring {lay.ring} x ulysses {lay.ulysses} = {degree} sequence "
            f"ranks, so some ranks would hold only padding; use a larger shape or fewer sequence ranks"
        )
    return errs


def check_warnings(ctx: LayoutContext, lay: Layout) -> list[str]:
    """Accepted-but-suspicious choices (uneven heads, groups that span or stay in nodes, padding)."""
    warns: list[str] = []
    H, U, G = ctx.num_heads, lay.ulysses, ctx.gpus_per_node
    if U <= H and H % U:
        split = head_split(H, U)
        hi, lo = split[0], split[-1]
        n_hi = H % U
        even = ", ".join(str(d) for d in range(1, min(H, ctx.world_size) + 1) if H % d == 0)
        warns.append(
            f"ulysses {U} splits {H} heads unevenly: {n_hi} ranks get {hi}, {U - n_hi} get {lo} "
            f"({hi / lo:.2f}x imbalance on attention); even splits: ulysses in {{{even}}}"
        )
    world = lay.world_size
    if U > 1 and any((s // G) != ((s + U - 1) // G) for s in range(0, world, U)):
        nodes = -(-U // G) if U >= G else 2
        warns.append(
            f"a Ulysses group of {U} ranks spans {counted(nodes, 'node')} ({G} GPUs per node): its all-to-all crosses "
            f"the inter-node fabric; prefer ulysses dividing {G} and ring across nodes"
        )
    R = lay.ring
    if R > 1 and ctx.nodes > 1:
        inside = False
        for g in range(world // (R * U)):
            for u in range(U):
                first = g * R * U + u
                last = first + (R - 1) * U
                if first // G == last // G:
                    inside = True
                    break
            if inside:
                break
        if inside:
            warns.append(
                f"a ring group of {R} ranks stays inside one node: ring attention there is usually slower "
                f"than Ulysses on the intra-node fabric; prefer ulysses = {G} and ring across nodes"
            )
    degree = lay.ring * lay.ulysses
    padded = padded_length(ctx.seq_len, degree)
    if padded != ctx.seq_len and ctx.seq_len >= degree and ctx.split == "uneven":
        chunks = sequence_chunks(ctx.seq_len, degree)
        warns.append(
            f"sequence of {ctx.seq_len} tokens split unevenly over ring {lay.ring} x ulysses {lay.ulysses} = "
            f"{degree} ranks: {ctx.seq_len % degree} hold {chunks[0]}, {degree - ctx.seq_len % degree} hold "
            f"{chunks[-1]} (the attention pads those to {chunks[0]})"
        )
    elif padded != ctx.seq_len and ctx.seq_len >= degree:
        warns.append(
            f"sequence of {ctx.seq_len} tokens padded to {padded} (+{padded - ctx.seq_len}) to split evenly "
            f"over ring {lay.ring} x ulysses {lay.ulysses} = {degree} ranks"
        )
    return warns


def feasible_layouts(ctx: LayoutContext) -> list[Layout]:
    return [lay for lay in factorizations(ctx.world_size) if not check_errors(ctx, lay)]


def feasible_text(ctx: LayoutContext, feasible: list[Layout]) -> str:
    if not feasible:
        return (
            f"no layout is feasible on {ctx.cluster} for this job (num_heads {ctx.num_heads}, "
            f"num_kv_heads {ctx.num_kv_heads}, batch {ctx.batch}, {ctx.seq_len} tokens)"
        )
    listed = ", ".join(compact(lay) for lay in feasible[:MAX_LISTED])
    more = f" (+{len(feasible) - MAX_LISTED} more)" if len(feasible) > MAX_LISTED else ""
    return f"feasible (dp x cfg x ring x ulysses): {listed}{more}"


# -- resolution -------------------------------------------------------------------------------
DimValue = Union[int, str, None]


def default_sizes(ctx: LayoutContext) -> dict[str, int]:
    return {"dp": 1, "cfg": 1, "ring": ctx.nodes, "ulysses": ctx.gpus_per_node}


def preference(ctx: LayoutContext, lay: Layout) -> tuple:
    """Sort key for filling ``auto`` (smaller is better): Ulysses inside a node, even head
    split, Ulysses as large as possible (up to GPUs per node), then ring, then cfg, then dp."""
    G, U = ctx.gpus_per_node, lay.ulysses
    spans = U > G or G % U != 0
    uneven = ctx.num_heads % U != 0
    return (spans, uneven, -U, -lay.ring, -lay.cfg, lay.dp)


#: ``choose(ctx, candidates) -> Layout``: picks among the feasible completions of ``auto``.
Chooser = Callable[[LayoutContext, list[Layout]], Layout]


def _nearest(ctx: LayoutContext, fixed: dict[str, int], unset: list[str]) -> Optional[Layout]:
    """The accepted layout nearest the default that keeps every dim the job sets: the unset
    ``ulysses`` as large as the model allows among the divisors of the GPUs per node (so it stays
    inside a node), the unset ``ring`` over the ranks left; None when there is none."""
    options = {"ulysses": divisors(ctx.gpus_per_node)[::-1] if "ulysses" in unset else [fixed["ulysses"]],
               "ring": divisors(ctx.world_size)[::-1] if "ring" in unset else [fixed["ring"]]}
    for u in options["ulysses"]:
        for r in options["ring"]:
            lay = Layout(dp=fixed["dp"], cfg=fixed["cfg"], ring=r, ulysses=u)
            if lay.world_size == ctx.world_size and not check_errors(ctx, lay):
                return lay
    return None


def _nearest_note(fixed: dict[str, int], unset: list[str], adapted: Layout, errs: list[str]) -> str:
    """The plan's note for a layout :func:`_nearest` chose: which unset dims moved, and why."""
    changed = "; ".join(f"parallel.{d} (not set) is {getattr(adapted, d)}, not the default {fixed[d]}"
                        for d in unset if getattr(adapted, d) != fixed[d])
    chosen = f"{short(adapted)} = {adapted.world_size} ranks"
    model = [e.split(";")[0] for e in errs if not e.startswith(f"{short(Layout(**fixed))} = ")]  # not a count
    if not model:  # only the sizes the job sets did not add up with the defaults
        return f"{changed}, to fit what the job sets: {chosen}"
    why = model[0]
    return (f"{changed}: the default (ulysses = GPUs per node, ring across nodes) cannot hold ({why}), so the "
            f"nearest layout that does is planned: {chosen}; set parallel.ulysses and parallel.ring to choose another")


def resolve_layout(ctx: LayoutContext, requested: dict[str, DimValue],
                   choose: Optional[Chooser] = None) -> tuple[Layout, list[str]]:
    """Requested dims (int, "auto" or None = default) -> (accepted Layout, warnings).

    ``auto`` dims are filled by ``choose`` (the planner passes the fastest-predicted chooser of
    sporch.orchestrator.plan.ranking); without one, by :func:`preference`.
    Raises LayoutError (with the feasible list) when the request cannot be met.
    """
    defaults = default_sizes(ctx)
    fixed: dict[str, int] = {}
    auto: list[str] = []
    for d in DIMS:
        v = requested.get(d)
        if v == "auto":
            auto.append(d)
        else:
            fixed[d] = defaults[d] if v is None else int(v)

    if not auto:
        lay = Layout(**fixed)
        errs = check_errors(ctx, lay)
        unset = [d for d in ("ring", "ulysses") if requested.get(d) is None]
        adapted = _nearest(ctx, fixed, unset) if errs and unset else None
        if adapted is not None:
            return adapted, [_nearest_note(fixed, unset, adapted, errs)] + check_warnings(ctx, adapted)
        if errs:
            feas = feasible_layouts(ctx)
            raise LayoutError("; ".join(errs) + "; " + feasible_text(ctx, feas), feas)
        return lay, check_warnings(ctx, lay)

    feas = feasible_layouts(ctx)
    matching = [lay for lay in feas if all(getattr(lay, d) == v for d, v in fixed.items())]
    if not matching:
        given = ", ".join(f"{d} {v}" for d, v in fixed.items()) or "no fixed dims"
        prod = 1
        for v in fixed.values():
            prod *= v
        if ctx.world_size % prod:
            why = f"{given} use {prod} ranks, which does not divide {ctx.world_size}"
        else:
            reasons: list[str] = []
            for lay in factorizations(ctx.world_size):
                if all(getattr(lay, d) == v for d, v in fixed.items()):
                    for e in check_errors(ctx, lay):
                        if e not in reasons:
                            reasons.append(e)
            why = "every completion is refused: " + "; ".join(reasons[:3])
        raise LayoutError(
            f"cannot fill {', '.join(f'parallel.{d}=auto' for d in auto)} with {given} on {ctx.cluster} "
            f"({counted(ctx.nodes, 'node')} x {counted(ctx.gpus_per_node, 'GPU')} = {ctx.world_size}): {why}; "
            + feasible_text(ctx, feas),
            feas,
        )
    lay = choose(ctx, matching) if choose else min(matching, key=lambda lay: preference(ctx, lay))
    return lay, check_warnings(ctx, lay)
