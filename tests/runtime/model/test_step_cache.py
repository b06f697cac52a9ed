"""Step caching under sequence parallelism (runtime/model/cache): sharded with a cache ==
unsharded with the same cache (float32, <= 1e-5 relative), the same steps skipped on every
rank, on 4 real gloo ranks (U4, R4, U2R2, cfg2xU2; Wan "cross" and Flux "joint"); and a
shard-dependent input on which per-rank local decisions differ while the reduced ones agree.

The tiny models have random weights, so their relative changes are large; each case's
threshold is picked so that some steps are skipped and some computed (asserted)."""

from __future__ import annotations

import pytest
import torch

from sporch.runtime.model.cache import FirstBlockCache, StepPolicy, make_step_cache
from sporch.runtime.model.cache.decision import relative_l1
from sporch.runtime.model.cache.teacache import COEFFICIENTS, polyval, rescale_coefficients
from sporch.runtime.testing import run_distributed

TOL = 1e-5
WORLD = 4
STEPS = 8
GRID = (2, 3, 3)  # 18 tokens: padded on R4/U4 (5 per rank), so padding must not count
LAYOUTS = {"U4": dict(ulysses=4), "R4": dict(ring=4), "U2R2": dict(ulysses=2, ring=2), "cfg2xU2": dict(cfg=2, ulysses=2)}
# (kind, method, guidance) -> threshold; guidance 4 runs CFG (batched unsharded, split on cfg2)
THRESHOLDS = {
    ("cross", "fbcache", 1.0): 0.13, ("cross", "fbcache", 4.0): 0.27,
    ("cross", "teacache", 1.0): 1.0, ("cross", "teacache", 4.0): 1.0,
    ("joint", "fbcache", 1.0): 1.0, ("joint", "fbcache", 4.0): 1.0,
    ("joint", "teacache", 1.0): 0.4, ("joint", "teacache", 4.0): 0.4,
}


def _cache(kind, method, guidance):
    return make_step_cache({"method": method, "threshold": THRESHOLDS[(kind, method, guidance)],
                            "warmup_steps": 1, "max_consecutive": 2}, STEPS)


def _world():
    from sporch.runtime.model import build_model, generate, tiny_model_dict
    from sporch.runtime.parallel import ParallelContext

    out = {}
    contexts = {name: ParallelContext.from_layout(**kw) for name, kw in LAYOUTS.items()}
    for kind in ("cross", "joint"):
        model = build_model(tiny_model_dict(kind), seed=7)
        for method in ("fbcache", "teacache"):
            for guidance in (1.0, 4.0):
                ref_cache = _cache(kind, method, guidance)
                ref = generate(model, None, grid=GRID, steps=STEPS, guidance_scale=guidance, seed=3,
                               step_cache=ref_cache)
                for name, ctx in contexts.items():
                    if (name == "cfg2xU2") != (guidance > 1):
                        continue
                    cache = _cache(kind, method, guidance)
                    got = generate(model, ctx, grid=GRID, steps=STEPS, guidance_scale=guidance, seed=3,
                                   step_cache=cache)
                    err = float((got - ref).abs().max() / ref.abs().max())
                    out[f"{kind}-{method}-{name}"] = dict(err=err, skipped=cache.skipped, computed=cache.computed,
                                                          ref_skipped=ref_cache.skipped)
    return out


@pytest.fixture(scope="module")
def world():
    return run_distributed(_world, WORLD, timeout=240)


CASES = [f"{k}-{m}-{lay}" for k in ("cross", "joint") for m in ("fbcache", "teacache") for lay in LAYOUTS]


@pytest.mark.parametrize("case", CASES)
def test_sharded_cache_equals_unsharded(world, case):
    per_rank = [r[case] for r in world]
    for r in per_rank:
        assert r["err"] <= TOL, (case, r["err"])
        assert r["skipped"] == r["ref_skipped"], (case, r["skipped"], r["ref_skipped"])
    assert all(r["skipped"] == per_rank[0]["skipped"] for r in per_rank), [r["skipped"] for r in per_rank]
    # the test can fail: steps were both skipped and computed
    assert per_rank[0]["skipped"] and per_rank[0]["computed"], per_rank[0]
    assert STEPS - 1 in per_rank[0]["computed"] and 0 in per_rank[0]["computed"]


class LocalToo(FirstBlockCache):
    """A first-block cache that also notes the decision this rank alone would take (its own
    shard's metric, not reduced): the thing that tears images when ranks decide alone."""

    def __init__(self, policy):
        super().__init__(policy)
        self.local: list[bool] = []

    def run(self, x, first, rest, probe, valid, ctx):
        if self.first_residual is not None and self.residual is not None:
            r1 = first(x) - x
            self.local.append(relative_l1(r1, self.first_residual, valid, None) < self.policy.threshold)
        return super().run(x, first, rest, probe, valid, ctx)


def _shard_dependent():
    from sporch.runtime.model import build_model, generate, tiny_model_dict
    from sporch.runtime.model.sampler import make_inputs
    from sporch.runtime.parallel import ParallelContext

    ctx = ParallelContext.from_layout(ulysses=2, ring=2)
    model = build_model(tiny_model_dict("cross"), seed=7)
    grid = (4, 2, 2)  # 16 tokens, 4 per rank: frame f is rank f's shard
    inputs = make_inputs(model, grid, 1, 3)
    inputs.noise[:, :, 0] *= 40.0  # frame 0 (rank 0's shard) far louder than the rest
    policy = StepPolicy(num_steps=STEPS, threshold=0.2, warmup_steps=1)
    cache = LocalToo(policy)
    x = generate(model, ctx, grid=grid, steps=STEPS, inputs=inputs, step_cache=cache)
    ref_cache = FirstBlockCache(StepPolicy(num_steps=STEPS, threshold=0.2, warmup_steps=1))
    ref = generate(model, None, grid=grid, steps=STEPS, inputs=inputs, step_cache=ref_cache)
    return dict(local=cache.local, skipped=cache.skipped, ref_skipped=ref_cache.skipped,
                err=float((x - ref).abs().max() / ref.abs().max()))


def test_ranks_agree_where_local_decisions_differ():
    res = run_distributed(_shard_dependent, WORLD, timeout=120)
    local = [r["local"] for r in res]
    assert any(len({row[i] for row in local}) > 1 for i in range(len(local[0]))), local  # ranks alone disagree
    assert all(r["skipped"] == res[0]["skipped"] == r["ref_skipped"] for r in res), [r["skipped"] for r in res]
    assert res[0]["skipped"] and len(res[0]["skipped"]) < STEPS - 2
    assert max(r["err"] for r in res) <= TOL


def _shared_changes():
    from sporch.runtime.model.cache.agreement import StepCacheDisagreement
    from sporch.runtime.model.cache.decision import shared_change
    from sporch.runtime.parallel import ParallelContext

    ctx = ParallelContext.from_layout(ulysses=2, cfg=2)
    rank = ctx.rank
    close = shared_change(0.25 * (1 + 1e-9 * rank), ctx)  # last bits differ: one value, the largest
    try:
        shared_change(0.25 + 0.1 * (rank == 0), ctx)  # rank 0's probe is another one
        apart = "no error"
    except StepCacheDisagreement as e:
        apart = str(e)
    return dict(close=close, apart=apart)


def test_a_shared_probe_is_taken_alike_and_a_rank_that_differs_fails_every_rank():
    """Wan's TeaCache probe (the time projection) is the same on every rank and not summed: its
    change is the largest over the sequence and cfg groups, so last-bit differences cannot split
    the decision, and a rank whose probe differs (a model bug, such as a rank that held only
    first-frame tokens of Wan2.2 TI2V) fails every rank at that step instead of hanging."""
    res = run_distributed(_shared_changes, WORLD, timeout=120)
    assert {r["close"] for r in res} == {0.25 * (1 + 3e-9)}
    assert all(r["apart"].startswith("step cache: the ranks' probe changes range from 0.25 to 0.35") for r in res), res


def test_relative_l1_counts_valid_tokens_only():
    now, before = torch.ones(1, 3, 2), torch.full((1, 3, 2), 2.0)
    now[:, 2] = 100.0  # a padding token's garbage
    assert relative_l1(now, before, torch.tensor([True, True, False]), None) == pytest.approx(0.5)


def test_policy_warmup_last_step_and_cap():
    p = StepPolicy(num_steps=6, threshold=1.0, warmup_steps=2, max_consecutive=2)
    assert [p.may_skip(i, 0) for i in range(6)] == [False, False, True, True, True, False]
    assert not p.may_skip(3, 2) and p.may_skip(3, 1)


def test_teacache_coefficients_are_the_published_ones():
    assert rescale_coefficients("Wan2.1-T2V-1.3B") == COEFFICIENTS["wan2.1-t2v-1.3b"]
    assert rescale_coefficients("tiny") == (1.0, 0.0) and polyval((1.0, 0.0), 0.3) == 0.3
    # Wan2.1 I2V: one polynomial per release (480P, 720P), the same architecture
    assert rescale_coefficients("wan2.1-i2v-14b-480p")[0] == 2.57151496e+05
    assert rescale_coefficients("wan2.1-i2v-14b-720p")[-1] == -4.17769401e-02
    assert polyval(COEFFICIENTS["flux.1-dev"], 0.0) == pytest.approx(0.264230861)


def test_two_experts_get_a_fresh_cache_at_the_switch():
    """Wan2.2 A14B: the low-noise expert's first step is computed (never the other expert's
    residual), and the record merges both experts' steps."""
    from sporch.runtime.model.cache import StepCaches

    caches = StepCaches({"method": "fbcache", "threshold": 1e9, "warmup_steps": 1, "max_consecutive": 0}, 6)
    x = torch.ones(1, 2, 3)
    valid = torch.ones(2, dtype=torch.bool)
    for step, expert in enumerate([0, 0, 0, 1, 1, 1]):
        caches.for_step(step, expert).bind(valid, None).run(x, lambda h: h + 1, lambda h: h * 2, lambda h: h)
    assert caches.caches[0].computed == [0] and caches.caches[0].skipped == [1, 2]
    assert caches.caches[1].computed == [3, 5] and caches.caches[1].skipped == [4]
    rec = caches.record()
    assert (rec["computed"], rec["skipped"]) == ([0, 3, 5], [1, 2, 4])
    assert rec["changes"][0] is None and rec["changes"][3] is None and len(rec["changes"]) == 6
    assert StepCaches(None, 6).for_step(0) is None
