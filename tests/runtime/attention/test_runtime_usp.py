"""USP attention on real gloo ranks against a float64 single-process reference."""

from __future__ import annotations

import json
from dataclasses import dataclass

import pytest
import torch

from sporch.runtime.testing import RankError, run_distributed
from tests.runtime.attention.usp_reference import reference_attention, sdpa_single

FP32_TOL = 2e-6


@dataclass(frozen=True)
class Case:
    name: str
    S: int
    H: int
    Hkv: int
    T: int = 0            # text tokens (joint_k/joint_v)
    joint_q: bool = False  # also text queries
    causal: bool = False
    B: int = 1
    D: int = 16


CASES = [
    Case("mha", 64, 8, 8),
    Case("mha-pad", 61, 8, 8, B=2),
    Case("gqa-kv<U", 40, 8, 2),
    Case("gqa-kv1", 33, 4, 1),
    Case("gqa-kv>U", 48, 12, 6),
    Case("uneven-heads", 45, 6, 6),
    Case("uneven-gqa", 29, 6, 2),
    Case("tiny-pad", 5, 8, 4),          # whole padded KV blocks on the ring
    Case("joint", 37, 8, 8, T=7, joint_q=True),
    Case("joint-gqa-uneven", 30, 6, 3, T=5, joint_q=True),
    Case("joint-kv-only", 36, 8, 4, T=6),
    Case("causal", 43, 8, 4, causal=True),
]

BF16_CASES = [CASES[1], CASES[4], CASES[5], CASES[8]]


def _inputs(case: Case, seed: int):
    g = torch.Generator().manual_seed(seed)
    B, S, H, Hkv, D, T = case.B, case.S, case.H, case.Hkv, case.D, case.T
    q = torch.randn(B, S, H, D, generator=g)
    k = torch.randn(B, S, Hkv, D, generator=g)
    v = torch.randn(B, S, Hkv, D, generator=g)
    jk = torch.randn(B, T, Hkv, D, generator=g) if T else None
    jv = torch.randn(B, T, Hkv, D, generator=g) if T else None
    jq = torch.randn(B, T, H, D, generator=g) if T and case.joint_q else None
    return q, k, v, jq, jk, jv


def _cast(ts, dtype):
    return [None if t is None else t.to(dtype) for t in ts]


def _run_cases(layouts, cases, dtypes):
    """Rank body: for every layout and case, run USP on this rank's shards and compare the gathered
    result to the float64 reference (computed on every rank). Returns rows of plain data."""
    from sporch.runtime.attention import CommStats, usp_attention, usp_min_bytes
    from sporch.runtime.parallel import ParallelContext

    rows = []
    for lay in layouts:
        ctx = ParallelContext.from_layout(**lay)
        for case in cases:
            for dtype in dtypes:
                # each dp x cfg replica computes its own sample
                seed = 7919 * ctx.dp_rank + 104729 * ctx.cfg_rank + case.S * 31 + case.H
                q, k, v, jq, jk, jv = _cast(_inputs(case, seed), dtype)
                stats = CommStats()
                res = usp_attention(ctx.shard_sequence(q), ctx.shard_sequence(k), ctx.shard_sequence(v), ctx,
                                    seq_len=case.S, causal=case.causal, joint_q=jq, joint_k=jk, joint_v=jv,
                                    stats=stats)
                out, text = res if jq is not None else (res, None)
                full = ctx.gather_sequence(out, seq_len=case.S)
                ro, rt = reference_attention(q, k, v, case.S, jq, jk, jv, case.causal)
                so, st = sdpa_single(q, k, v, case.S, jq, jk, jv, case.causal)
                err = (full.double() - ro).abs().max().item()
                base = (so.double() - ro).abs().max().item()
                if text is not None:
                    err = max(err, (text.double() - rt).abs().max().item())
                    base = max(base, (st.double() - rt).abs().max().item())
                minimum = usp_min_bytes(batch=case.B, local_len=ctx.local_len(case.S), num_heads=case.H,
                                        num_kv_heads=case.Hkv, head_dim=case.D, ulysses=ctx.ulysses,
                                        ring=ctx.ring, ulysses_rank=ctx.ulysses_rank,
                                        itemsize=q.element_size(), joint_len=case.T, joint_q=jq is not None)
                rows.append(dict(layout=dict(lay), case=case.name, dtype=str(dtype), err=err, sdpa_err=base,
                                 replica=(ctx.dp_rank, ctx.cfg_rank), checksum=float(full.double().sum()),
                                 finite=bool(torch.isfinite(full).all()), sent=dict(stats.sent), minimum=minimum,
                                 shape_ok=tuple(out.shape) == tuple(ctx.shard_sequence(q).shape)))
    return rows


def _check(results):
    assert results, "no ranks"
    n = 0
    for rank, rows in enumerate(results):
        for r in rows:
            where = f"rank {rank} {r['layout']} {r['case']} {r['dtype']}"
            assert r["finite"], where
            assert r["shape_ok"], where
            if r["dtype"] == "torch.float32":
                assert r["err"] <= FP32_TOL, f"{where}: error {r['err']:.3g}"
            else:
                assert r["err"] <= 2 * r["sdpa_err"], f"{where}: error {r['err']:.3g} vs SDPA {r['sdpa_err']:.3g}"
            assert r["sent"] == r["minimum"], f"{where}: sent {r['sent']} != minimum {r['minimum']}"
            n += 1
    return n


LAYOUTS_4 = [dict(ulysses=4), dict(ring=2, ulysses=2), dict(ring=4)]
LAYOUTS_8 = [dict(ring=4, ulysses=2), dict(ring=2, ulysses=4), dict(dp=2, ring=2, ulysses=2),
             dict(cfg=2, ring=2, ulysses=2), dict(dp=2, cfg=2, ring=2)]


def test_usp_4_ranks_float32_and_bf16():
    results = run_distributed(_run_cases_both, 4, LAYOUTS_4, timeout=300)
    assert _check(results) == 4 * len(LAYOUTS_4) * (len(CASES) + len(BF16_CASES))


def _run_cases_both(layouts):
    return (_run_cases(layouts, CASES, [torch.float32])
            + _run_cases(layouts, BF16_CASES, [torch.bfloat16]))


def test_usp_8_ranks_with_dp_and_cfg():
    cases = [c for c in CASES if c.name in ("mha-pad", "gqa-kv<U", "gqa-kv>U", "uneven-gqa", "tiny-pad",
                                                 "joint-gqa-uneven", "causal")]
    results = run_distributed(_run_cases_8, 8, LAYOUTS_8, cases, timeout=300)
    assert _check(results) == 8 * len(LAYOUTS_8) * (len(cases) + 1)
    # every dp x cfg replica solved its own problem: the gathered output is the same on all
    # ranks of a replica and differs between replicas
    by_problem = {}
    for rows in results:
        for r in rows:
            key = (json.dumps(r["layout"], sort_keys=True), r["case"], r["dtype"])
            by_problem.setdefault(key, {}).setdefault(r["replica"], set()).add(r["checksum"])
    assert {k[0] for k in by_problem} == {json.dumps(x, sort_keys=True) for x in LAYOUTS_8}
    for key, replicas in by_problem.items():
        assert all(len(sums) == 1 for sums in replicas.values()), f"{key}: ranks of one replica disagree"
        lay = json.loads(key[0])
        assert len(replicas) == lay.get("dp", 1) * lay.get("cfg", 1), key
        firsts = [next(iter(sums)) for sums in replicas.values()]
        assert len(set(firsts)) == len(firsts), f"{key}: two replicas computed the same output"


def _run_cases_8(layouts, cases):
    return (_run_cases(layouts, cases, [torch.float32])
            + _run_cases(layouts, [cases[-2]], [torch.bfloat16]))


def test_min_bytes_formula_even_mha():
    """The closed form for MHA with even heads: (U-1)/U of q, k, v and of the output; R-1 KV blocks."""
    from sporch.runtime.attention import usp_min_bytes

    B, L, H, D, e = 2, 16, 8, 16, 4
    for U, R in [(4, 1), (2, 2), (1, 4), (2, 4), (4, 2)]:
        m = usp_min_bytes(batch=B, local_len=L, num_heads=H, num_kv_heads=H, head_dim=D, ulysses=U, ring=R,
                          ulysses_rank=0, itemsize=e)
        local = B * L * H * D * e
        expect = {}
        if U > 1:
            expect["ulysses_qkv"] = 3 * local * (U - 1) // U
            expect["ulysses_out"] = local * (U - 1) // U
        if R > 1:
            expect["ring_kv"] = (R - 1) * 2 * B * (U * L) * (H // U) * D * e
        assert m == expect, (U, R)


# -- failure ------------------------------------------------------------------------------

def _fail_on_rank(bad_rank):
    import torch.distributed as dist

    from sporch.runtime.attention import usp_attention
    from sporch.runtime.parallel import ContextBroken, ParallelContext

    ctx = ParallelContext.from_layout(ring=2, ulysses=2)
    q = torch.randn(1, 8, 4, 16)
    k = torch.randn(1, 8, 4, 16)
    if dist.get_rank() == bad_rank:
        k = torch.randn(1, 8, 3, 16)  # 4 query heads over 3 KV heads: invalid
    try:
        usp_attention(q, k, k, ctx)
    except ValueError:
        assert not ctx.healthy
        with pytest.raises(ContextBroken):
            usp_attention(q, q, q, ctx)
        raise
    return "ok"


def test_failing_rank_is_named_and_nothing_hangs():
    with pytest.raises(RankError) as info:
        run_distributed(_fail_on_rank, 4, 2, timeout=60)
    assert info.value.rank == 2
    assert "rank 2" in str(info.value)
    assert isinstance(info.value.original, ValueError)
    assert "KV heads" in str(info.value)


# -- single process -------------------------------------------------------------------------

def _single(case):
    from sporch.runtime.attention import usp_attention
    from sporch.runtime.parallel import ParallelContext

    ctx = ParallelContext.from_layout()
    q, k, v, jq, jk, jv = _inputs(case, 3)
    res = usp_attention(ctx.shard_sequence(q), ctx.shard_sequence(k), ctx.shard_sequence(v), ctx,
                        seq_len=case.S, joint_q=jq, joint_k=jk, joint_v=jv, causal=case.causal, backend="math")
    ro, rt = reference_attention(q, k, v, case.S, jq, jk, jv, case.causal)
    out, text = res if jq is not None else (res, None)
    err = (out.double() - ro).abs().max().item()
    if text is not None:
        err = max(err, (text.double() - rt).abs().max().item())
    return err


def test_world_of_one_math_backend():
    errs = run_distributed(_single, 1, CASES[8], timeout=60)
    assert errs[0] <= FP32_TOL


# -- Ulysses verbs ----------------------------------------------------------------------------

def _verbs(H):
    from sporch.runtime.attention import CommStats, gather_heads_scatter_seq, gather_seq_scatter_heads
    from sporch.orchestrator.contract.parallel import head_split as split_heads
    from sporch.runtime.parallel import ParallelContext, head_offsets

    ctx = ParallelContext.from_layout(ring=2, ulysses=2)
    g = torch.Generator().manual_seed(ctx.dp_rank)
    x = torch.randn(2, 24, H, 8, generator=g)
    local = ctx.shard_sequence(x)
    stats = CommStats()
    mid = gather_seq_scatter_heads(local, ctx, stats=stats)
    counts = split_heads(H, ctx.ulysses)
    s = head_offsets(counts)[ctx.ulysses_rank]
    lo = ctx.ring_rank * ctx.ulysses * local.shape[1]
    expect = x[:, lo:lo + ctx.ulysses * local.shape[1], s:s + counts[ctx.ulysses_rank]]
    back = gather_heads_scatter_seq(mid, ctx, H, stats=stats)
    return torch.equal(mid, expect), torch.equal(back, local), dict(stats.sent)


def test_ulysses_verbs_round_trip_uneven_heads():
    res = run_distributed(_verbs, 4, 5, timeout=60)
    assert all(r[0] and r[1] for r in res), res
    # rank 0 keeps 3 of 5 heads and sends 2; it gets back 3-head output and sends the other chunk
    assert res[0][2] == {"ulysses_gather_seq": 2 * 2 * 6 * 8 * 4, "ulysses_out": 2 * 6 * 3 * 8 * 4}
