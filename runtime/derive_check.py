"""Derive and check split plans: the process behind a class whose split plan sporch derives.

``python -m sporch.runtime.derive_check [--json] -- CLASS...``: for each class (of a family),
derive the candidate plans from a tiny instance (runtime/models/derive.py), then check every
class's candidates in one spawned world of 4 gloo ranks: each candidate on 2 sequence ranks
(Ulysses, ring; dp 2) and on 4 (Ulysses, ring, both) over an uneven token count, against the
unsharded class on the same inputs, until one is exact everywhere (relative error at most
``TOLERANCE``, float32). Each verdict (``PlanVerdict``: the plan, or the refusal with the largest
error) is cached per class and diffusers version (models/families/derived_plans.py) and printed.

The ranks of a job that need a plan not cached yet start this process
(runtime/models/derived.py), as does ``sporch inspect DIR`` for such a folder; :func:`check`
serves tests and benches with classes no family has yet (a :class:`DeriveSpec` of their own).
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import time
from pathlib import Path
from typing import Iterable, Optional

import torch
import torch.distributed as dist

from sporch.orchestrator.models.families import require_family
from sporch.orchestrator.models.families.derived_plans import (SEQUENCE_RANKS, TOLERANCE, PlanVerdict, diffusers_version,
                                                               read_verdict, write_verdict)
from sporch.orchestrator.models.families.plan_format import SplitPlan
from sporch.runtime.models.derive import IMAGE_GRIDS, VIDEO_GRIDS, DeriveSpec, derive
from sporch.runtime.models.derived import checking_lock
from sporch.runtime.models.families import family_module
from sporch.runtime.models.sequence_parallel import SequenceParallel
from sporch.runtime.models.trace import block_lists, tensors_in
from sporch.runtime.parallel import ParallelContext
from sporch.runtime.testing import run_distributed

__all__ = ["LAYOUTS", "MAX_CANDIDATES", "family_spec", "check", "ensure", "compare", "main"]

#: The layouts each candidate is checked on, by number of sequence ranks (a world of 4 gloo ranks).
LAYOUTS = {2: (dict(dp=2, ulysses=2), dict(dp=2, ring=2)),
           4: (dict(ulysses=4), dict(ring=4), dict(ulysses=2, ring=2))}
#: How many candidates the check tries at most per class.
MAX_CANDIDATES = 6
#: Zeroing every attention must move the tiny model's output by at least this (relative), else an
#: exact sharded output proves nothing.
MIN_ATTENTION_EFFECT = 1e3 * TOLERANCE


def family_spec(class_name: str) -> DeriveSpec:
    """The tiny instance of ``class_name`` from its family's runtime module: ``TINY`` (or
    ``DERIVE_CONFIG``), its forward ``inputs`` (``derive_inputs`` where the module has one: the
    fullest call the class gets, masks and per-token inputs included) and two token grids
    (``DERIVE_GRIDS``, else video or image ones by the family)."""
    fam = require_family(class_name)
    mod = family_module(fam.name)
    grids = getattr(mod, "DERIVE_GRIDS", VIDEO_GRIDS if fam.video else IMAGE_GRIDS)
    return DeriveSpec(class_name, dict(getattr(mod, "DERIVE_CONFIG", mod.TINY)),
                      getattr(mod, "derive_inputs", mod.inputs), grids=tuple(grids))


def check(specs: Iterable[DeriveSpec], *, timeout: float = 600.0) -> list[PlanVerdict]:
    """Derive and check every spec's class (one gloo world for all); the verdicts, in order."""
    specs = list(specs)
    started = time.perf_counter()
    derivations = [derive(s) for s in specs]
    jobs = [(s, [c.plan for c in d.candidates[:MAX_CANDIDATES]]) for s, d in zip(specs, derivations)]
    todo = [j for j in jobs if j[1]]
    found = iter(run_distributed(_check_world, 4, todo, timeout=timeout)[0] if todo else [])
    seconds = (time.perf_counter() - started) / max(1, len(specs))
    version = diffusers_version()
    layouts = tuple(_label(layout) for n in SEQUENCE_RANKS for layout in LAYOUTS[n])
    out = []
    for spec, d, (_, plans) in zip(specs, derivations, jobs):
        if not plans:
            out.append(PlanVerdict(spec.class_name, version, exact=False, plan=None, stack=d.stack,
                                   reason=d.problems[0] if d.problems else "no candidate fits", seconds=seconds))
            continue
        r = next(found)
        index = r["chosen"] if r["chosen"] is not None else r["best"]
        tried = r["tried"][index]
        exact = r["chosen"] is not None and r["attention_effect"] >= MIN_ATTENTION_EFFECT
        if exact:
            reason = ""
        elif r["chosen"] is not None:
            reason = (f"zeroing attention moves the tiny model's output by {r['attention_effect']:.2g} only: the "
                      "check proves nothing")
        else:
            reason = tried["failure"] or f"{len(plans)} candidate plan(s) tried, none exact"
        out.append(PlanVerdict(spec.class_name, version, exact=exact, plan=plans[index], errors=tried["rel"],
                               abs_errors=tried["abs"], reason=reason, note=d.candidates[index].note, stack=d.stack,
                               attention_effect=r["attention_effect"], tokens=spec.tokens(0), layouts=layouts,
                               seconds=seconds))
    return out


def _label(layout: dict) -> str:
    dp = layout.get("dp", 1)
    return "".join(f"{k[0].upper()}{v}" for k, v in layout.items() if k != "dp") + (f" (dp{dp})" if dp > 1 else "")


def _first(out) -> torch.Tensor:
    return out[0] if isinstance(out, (tuple, list)) else getattr(out, "sample", out)


class _ZeroAttention(torch.overrides.TorchFunctionMode):
    """Every SDPA call returns zeros (how much attention moves the output)."""

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if func is torch.nn.functional.scaled_dot_product_attention:
            return torch.zeros_like(kwargs["query"] if "query" in kwargs else args[0])
        return func(*args, **kwargs)


@torch.no_grad()
def _check_world(jobs: list[tuple[DeriveSpec, list[SplitPlan]]]) -> list[dict]:
    """On every rank of a world of 4: each class's candidates, in order, until one is exact on every
    layout of :data:`LAYOUTS` (the ranks agree on each candidate's errors, an all-reduce, so they
    stop together)."""
    out = []
    for spec, plans in jobs:
        model = spec.model()
        inputs = spec.make_inputs(0)
        ref = _first(model(**inputs)).float()
        scale = max(float(ref.abs().max()), 1e-30)
        with _ZeroAttention():
            effect = float((_first(model(**inputs)).float() - ref).abs().max()) / scale
        tried, chosen = [], None
        for plan in plans:
            worst, failure = {n: 0.0 for n in LAYOUTS}, ""
            for n, layouts in LAYOUTS.items():
                for layout in layouts:
                    ctx = ParallelContext.from_layout(**layout)
                    try:
                        with SequenceParallel(model, ctx, plan):
                            got = _first(model(**inputs)).float()
                        err = float((got - ref).abs().max()) if got.shape == ref.shape else math.inf
                    except Exception as exc:  # noqa: BLE001 - a candidate that fails is not exact
                        err, failure = math.inf, f"{type(exc).__name__}: {(str(exc).splitlines() or [''])[0][:160]}"
                    finally:
                        ctx.close()
                    worst[n] = max(worst[n], err if math.isfinite(err) else math.inf)
            agreed = torch.tensor([worst[n] for n in LAYOUTS], dtype=torch.float64)
            dist.all_reduce(agreed, op=dist.ReduceOp.MAX)
            abs_err = dict(zip(LAYOUTS, agreed.tolist()))
            tried.append({"abs": abs_err, "rel": {n: e / scale for n, e in abs_err.items()}, "failure": failure})
            if all(e / scale <= TOLERANCE for e in abs_err.values()):
                chosen = len(tried) - 1
                break
        SequenceParallel.remove(model)
        best = min(range(len(tried)), key=lambda i: max(tried[i]["rel"].values()))
        out.append({"chosen": chosen, "best": best, "tried": tried, "attention_effect": effect})
    return out


def compare(pairs: Iterable[tuple[DeriveSpec, SplitPlan, SplitPlan, tuple]], *, layout: Optional[dict] = None,
            timeout: float = 600.0) -> list[dict]:
    """Whether two plans cut a class the same way: for each (spec, plan a, plan b, the attention
    modules ``b`` keeps local: a shipped table's ``Family.local_attention``; a derived plan needs
    none), on one world of
    4 gloo ranks (``layout``, default U2R2, the spec's uneven token count), what every block of the
    class's block lists receives on every rank under ``a`` and under ``b``: ``block_inputs`` (the
    largest difference of any tensor argument; inf where a shape or the arguments differ, with
    ``mismatch`` saying the first), ``output`` (of the two sharded outputs) and ``errors`` (each
    against the unsharded output, relative)."""
    return run_distributed(_compare_world, 4, list(pairs), layout or dict(ulysses=2, ring=2), timeout=timeout)[0]


def _blocks_seen(model: torch.nn.Module, plan: SplitPlan, ctx, inputs: dict,
                 local: tuple = ()) -> tuple[list, torch.Tensor]:
    """(every block call's tensor arguments, in order; the output) of one sharded forward."""
    seen: list = []
    handles = []

    def recorder(name: str):
        def record(mod, args, kwargs):
            bound = dict(enumerate(args)) | dict(kwargs)
            seen.append((name, {(k, *p): t.detach().clone() for k, v in bound.items() for p, t in tensors_in(v)}))
        return record

    try:
        with SequenceParallel(model, ctx, plan, local_attention=tuple(local)):
            # registered after the plan's hooks, so each sees what the block gets once they have split it
            handles = [block.register_forward_pre_hook(recorder(f"{name}.{i}"), with_kwargs=True)
                       for name in block_lists(model) for i, block in enumerate(getattr(model, name))]
            out = _first(model(**inputs)).float()
    finally:
        for h in handles:
            h.remove()
        SequenceParallel.remove(model)
    return seen, out


@torch.no_grad()
def _compare_world(pairs: list, layout: dict) -> list[dict]:
    out = []
    ctx = ParallelContext.from_layout(**layout)
    try:
        for spec, a, b, local_b in pairs:
            model = spec.model()
            inputs = spec.make_inputs(0)
            ref = _first(model(**inputs)).float()
            scale = max(float(ref.abs().max()), 1e-30)
            seen_a, out_a = _blocks_seen(model, a, ctx, inputs)
            seen_b, out_b = _blocks_seen(model, b, ctx, inputs, local_b)
            worst, mismatch = 0.0, ""
            for (name_a, xa), (name_b, xb) in zip(seen_a, seen_b):
                if name_a != name_b or xa.keys() != xb.keys():
                    worst, mismatch = math.inf, mismatch or f"{name_a}: the arguments differ"
                    continue
                for key in xa:
                    if xa[key].shape != xb[key].shape:
                        worst = math.inf
                        mismatch = mismatch or (f"{name_a} {key[0]}: shape {tuple(xa[key].shape)} under the first "
                                                f"plan, {tuple(xb[key].shape)} under the second")
                    elif xa[key].is_floating_point():
                        worst = max(worst, float((xa[key] - xb[key]).abs().max()) if xa[key].numel() else 0.0)
                    elif not torch.equal(xa[key], xb[key]):
                        worst, mismatch = math.inf, mismatch or f"{name_a} {key[0]}: other values"
            if len(seen_a) != len(seen_b):
                worst, mismatch = math.inf, mismatch or "a different number of block calls"
            numbers = torch.tensor([worst, float((out_a - out_b).abs().max()), float((out_a - ref).abs().max()),
                                    float((out_b - ref).abs().max())], dtype=torch.float64)
            dist.all_reduce(numbers, op=dist.ReduceOp.MAX)
            w, o, ea, eb = numbers.tolist()
            out.append({"class_name": spec.class_name, "block_inputs": w, "output": o,
                        "errors": (ea / scale, eb / scale), "mismatch": mismatch})
    finally:
        ctx.close()
    return out


def ensure(class_names: Iterable[str], folder: Optional[Path] = None, *, locked: bool = False) -> list[PlanVerdict]:
    """The verdicts of ``class_names`` (classes of the families): cached ones as they are, the rest
    derived and checked now (one world for all of them) and cached. ``locked``: the caller holds
    the cache folder's lock (derived.checking_lock)."""
    names = list(dict.fromkeys(class_names))
    if not locked:
        with checking_lock(folder):
            return ensure(names, folder, locked=True)
    found = {n: read_verdict(n, folder=folder) for n in names}
    missing = [n for n in names if found[n] is None]
    if missing:
        for verdict in check([family_spec(n) for n in missing]):
            write_verdict(verdict, folder)
            found[verdict.class_name] = verdict
    return [found[n] for n in names]


def main(argv: Optional[list[str]] = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m sporch.runtime.derive_check",
                                     description="Derive, check and cache the split plans of diffusers classes.")
    parser.add_argument("classes", nargs="+", metavar="CLASS", help="diffusers transformer classes of sporch's families")
    parser.add_argument("--json", action="store_true", help="print the verdicts as JSON")
    parser.add_argument("--caller-holds-lock", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    try:
        for name in args.classes:
            require_family(name)
    except Exception as exc:  # noqa: BLE001 - an unknown class is one line
        print(f"error: {' '.join(str(exc).split())}", file=sys.stderr)
        return 2
    try:
        verdicts = ensure(args.classes, locked=args.caller_holds_lock)
    except ValueError as exc:  # a cache folder that cannot be written
        print(f"error: {exc}", file=sys.stderr)
        return 2
    if args.json:
        print(json.dumps([v.to_json() for v in verdicts]))
    else:
        for v in verdicts:
            print(f"{v.class_name}: {v.summary() if v.exact else v.refusal()}")
    return 0


if __name__ == "__main__":  # pragma: no cover - a process of its own (derived.py, sporch inspect)
    sys.exit(main())
