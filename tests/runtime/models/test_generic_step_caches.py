"""Every step cache on every family on the generic path skips the same steps sharded as unsharded
(issue 47 item 3): fbcache, teacache, taylorseer and magcache (measuring its ratios, then skipping
with them) on a tiny run of each family of ``orchestrator/models/families`` and a two-expert
Wan2.2-style run (tests/runtime/models/step_cache_subjects.py: the family's tiny diffusers pipeline
where it has one, else a direct Euler loop on its tiny config), float32.

The unsharded runs are made here, in the test process, and choose each threshold: a value between
the tiny model's measured changes such that every cache context both skips and computes steps and
no decision value lies within 0.1 % of it (so float32 rounding between layouts cannot flip a
decision; a sharded run that decided from its own chunk would differ by far more). MagCache skips
with the ratios its unsharded measuring run recorded, as a user gives them back.

Then ONE spawned world of 4 gloo ranks runs every case on U4 and on U2R2, and on cfg 2 x U2 for a
pipeline that batches its CFG passes (LTX-Video) and one that calls the transformer twice
(Qwen-Image: each cfg rank's cache holds one context): on every rank, each context's computed and
skipped steps equal the unsharded run's, each step's measured change (the fbcache / TeaCache change,
MagCache's ratio, TaylorSeer's prediction error) equals it within 1e-4 relative, and the output
equals the unsharded cached output within 1e-4 of its largest value.
"""

from __future__ import annotations

import math
import sys
from pathlib import Path

import pytest

pytest.importorskip("diffusers")

sys.path.insert(0, str(Path(__file__).resolve().parent))
from step_cache_subjects import make_subject, run_cached, subject_names  # noqa: E402

from sporch.runtime.testing import run_distributed  # noqa: E402

TOL = 1e-4
MARGIN = 1e-3
LAYOUTS = {"U4": dict(ulysses=4), "U2R2": dict(ulysses=2, ring=2), "cfg2U2": dict(cfg=2, ulysses=2)}
#: the subjects also run on cfg 2 x U2, and how their pipeline applies CFG
CFG2 = {"ltx-video": "batched", "qwen-image": "two_calls"}
CASES = ("fbcache", "teacache", "taylorseer", "magcache-measure", "magcache")
#: TaylorSeer's schedule: computed at 0 (warm-up), 2, 4 and the last step
TAYLOR = {"method": "taylorseer", "interval": 2, "order": 1}
#: denoising steps: 5 (TaylorSeer computes 0, 2, 4 and skips 1, 3); Wan2.2 keeps 6, so that its second expert
#: takes over at step 3, a step TaylorSeer's schedule would skip (test_the_second_expert_starts_with_a_computed_step)
STEPS = {"wan2.2": 6}


def _steps_of(name: str) -> int:
    return STEPS.get(name, 5)


def _subject(name: str):
    return make_subject(name, _steps_of(name))


def _allowed(step: int, steps: int) -> bool:
    """sporch's step policy with the section's defaults (warm-up 1, no cap) on ``steps`` steps."""
    return 1 <= step < steps - 1


def decision_values(method: str, record: dict, threshold: float, steps: int) -> list[float]:
    """The numbers a run compared with ``threshold``: fbcache's change at each step the policy
    allowed to skip; TeaCache's accumulated (identity-rescaled) change there."""
    if method == "fbcache":
        return [c for s, c in _steps(record) if _allowed(s, steps) and c is not None]
    out, acc = [], 0.0
    for s, c in _steps(record):  # TeaCacheRule.decide, step by step
        skip = False
        if c is not None and _allowed(s, steps):
            acc += c
            out.append(acc)
            skip = acc < threshold
        if not skip:
            acc = 0.0
    return out


def _steps(record: dict) -> list[tuple[int, float | None]]:
    steps = sorted(record["computed"] + record["skipped"])
    return list(zip(steps, record["changes"]))


def _nontrivial(records: dict) -> bool:
    return all(r["skipped"] and len(r["computed"]) >= 2 for r in records.values())


def _choose(subject, method: str, candidates) -> tuple[dict, dict]:
    """The first of ``candidates`` (sections) whose unsharded run both skips and computes in every
    context with every decision value clear of its threshold; (section, run)."""
    from sporch.orchestrator.contract.sections import CacheSection

    tried = []
    for section in candidates:
        got = run_cached(subject, None, CacheSection.from_dict(section))
        thr = section.get("threshold") or 0.0
        values = [v for r in got["records"].values() for v in decision_values(method, r, thr, subject.steps)] \
            if method in ("fbcache", "teacache") else []
        clear = all(abs(v - thr) > MARGIN * max(thr, 1e-9) for v in values)
        tried.append((section.get("threshold"), {n: r["skipped"] for n, r in got["records"].items()}, clear))
        if _nontrivial(got["records"]) and clear:
            return section, got
    raise AssertionError(f"{subject.name} {method}: no threshold makes the tiny run both skip and compute "
                         f"clear of its decision values: {tried}")


def _between(changes: list[float]) -> list[float]:
    """Thresholds between consecutive distinct values of ``changes``, middle ones first."""
    values = sorted(set(round(c, 6) for c in changes))
    mids = [(a + b) / 2 for a, b in zip(values, values[1:])]
    return sorted(mids, key=lambda m: abs(mids.index(m) - len(mids) / 2))


def unsharded_cases(subject) -> dict[str, tuple[dict, dict]]:
    """case -> (the section, its unsharded run) for ``subject``."""
    from sporch.orchestrator.contract.sections import CacheSection

    out = {}
    for method in ("fbcache", "teacache"):
        probe = run_cached(subject, None, CacheSection(method=method, threshold=0.0))
        changes = [c for r in probe["records"].values() for s, c in _steps(r) if c is not None and _allowed(s, subject.steps)]
        scale = 1.0 if method == "fbcache" else 2.0  # TeaCache's sum: about two steps' change
        out[method] = _choose(subject, method, [{"method": method, "threshold": scale * t} for t in _between(changes)])
    out["taylorseer"] = _choose(subject, "taylorseer", [TAYLOR])
    measured = run_cached(subject, None, CacheSection(method="magcache", threshold=0.0))
    out["magcache-measure"] = ({"method": "magcache", "threshold": 0.0}, measured)
    ratios = next(iter(measured["records"].values()))["changes"]  # result.json's step_cache.changes
    out["magcache"] = _choose(subject, "magcache", [{"method": "magcache", "threshold": t, "ratios": ratios}
                                                    for t in (0.1, 0.2, 0.05, 0.3, 0.5, 0.8)])
    return out


def _world(sections: dict) -> dict:
    from sporch.orchestrator.contract.sections import CacheSection
    from sporch.orchestrator.models.families import PipelineCfg
    from sporch.runtime.parallel import ParallelContext

    subjects = {name: _subject(name) for name in sections}
    out = {}
    for layout, sizes in LAYOUTS.items():
        ctx = ParallelContext.from_layout(**sizes)
        for name, cases in sections.items():
            if layout == "cfg2U2" and name not in CFG2:
                continue
            split = PipelineCfg(CFG2[name]) if layout == "cfg2U2" else None
            for case, section in cases.items():
                got = run_cached(subjects[name], ctx, CacheSection.from_dict(section), split=split)
                out[f"{layout}/{name}/{case}"] = {"records": got["records"], "out": got["out"]}
        ctx.close()
    return out


@pytest.fixture(scope="module")
def unsharded() -> dict:
    return {name: unsharded_cases(_subject(name)) for name in subject_names()}


@pytest.fixture(scope="module")
def world(unsharded) -> list[dict]:
    sections = {name: {case: section for case, (section, _) in cases.items()} for name, cases in unsharded.items()}
    return run_distributed(_world, 4, sections, timeout=1200)


def _close(a: list, b: list) -> bool:
    return len(a) == len(b) and all((x is None and y is None) or (x is not None and y is not None and (
        math.isclose(x, y, rel_tol=TOL, abs_tol=TOL))) for x, y in zip(a, b))


@pytest.mark.parametrize("case", ("fbcache", "teacache", "taylorseer", "magcache"))
def test_the_second_expert_starts_with_a_computed_step(unsharded, case):
    """Wan2.2's low-noise expert has its own cache state: its first step computes (no residual of
    the other expert's blocks is reused), in every context."""
    switch = _steps_of("wan2.2") // 2  # step_cache_subjects' _loop_subject: the second expert from steps // 2

    for context, rec in unsharded["wan2.2"][case][1]["records"].items():
        assert switch in rec["computed"], (case, context, rec)


@pytest.mark.timeout(1200)  # the first case sets the world up: 100 sharded runs of 4 ranks (2.5 CPU-minutes)
@pytest.mark.parametrize("name", subject_names())
@pytest.mark.parametrize("case", CASES)
def test_the_cache_skips_the_steps_sharded_it_skips_unsharded(unsharded, world, name, case):
    section, ref = unsharded[name][case]
    if case != "magcache-measure":
        assert _nontrivial(ref["records"]), (name, case, ref["records"])  # else the comparison proves little
    scale = float(ref["out"].abs().max())
    layouts = [k for k in LAYOUTS if k != "cfg2U2" or name in CFG2]
    for layout in layouts:
        seen: set[str] = set()
        for rank, w in enumerate(world):
            got = w[f"{layout}/{name}/{case}"]
            for context, rec in got["records"].items():
                want = ref["records"][context]
                where = f"{name} {case} {layout} rank {rank} context {context}"
                assert (rec["computed"], rec["skipped"]) == (want["computed"], want["skipped"]), \
                    f"{where}: computed {rec['computed']}, unsharded {want['computed']}"
                assert _close(rec["changes"], want["changes"]), f"{where}: changes {rec['changes']} vs {want['changes']}"
                seen.add(context)
            err = float((got["out"] - ref["out"]).abs().max()) / scale
            assert err <= TOL, f"{name} {case} {layout} rank {rank}: output off by {err:.3g} of its largest value"
        assert seen == set(ref["records"]), (layout, seen, set(ref["records"]))
