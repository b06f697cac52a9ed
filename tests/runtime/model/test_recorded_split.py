"""The hand-built runtime follows the head split and padding the planner recorded
(``plan.heads.q_heads_per_rank``, ``plan.sequence.tokens_per_rank``) instead of deciding again,
and refuses in one line a record that does not describe its model, grid and layout.

One world of 2 gloo ranks (ulysses=2), a tiny 6-head model on a 9-token grid: the planner's
record is 5 tokens per rank and heads [3, 3]; an edited record (6 tokens per rank, heads [4, 2])
is followed (the result still matches the unsharded forward, and the Ulysses exchange sends by
the recorded split), a wrong one is refused."""

from __future__ import annotations

import dataclasses

from sporch.runtime.testing import run_distributed

GRID = (1, 3, 3)


def _rank():
    import torch.distributed as dist

    from sporch.orchestrator.contract.plan import Layout
    from sporch.runtime.attention import CommStats
    from sporch.runtime.model import build_model, tiny_model_dict, verify
    from sporch.runtime.model.sharded import ShardedDiT
    from sporch.runtime.parallel import ParallelContext
    from sporch.runtime.testing import plan_for

    model_dict = tiny_model_dict("cross", hidden=96, num_heads=6, num_kv_heads=6)
    model = build_model(model_dict, seed=7)
    plan = plan_for(Layout(ulysses=2), model_dict, GRID)
    out = {"planned": (plan.sequence.tokens_per_rank, list(plan.heads.q_heads_per_rank))}

    edited = dataclasses.replace(
        plan, sequence=dataclasses.replace(plan.sequence, tokens_per_rank=6, padded_len=12, pad=3),
        heads=dataclasses.replace(plan.heads, q_heads_per_rank=[4, 2], even=False))
    ctx = ParallelContext.from_plan(edited)
    ctx.comm_stats = CommStats()
    runner = ShardedDiT(model, ctx, grid=GRID)
    out["followed"] = (runner.local_len, list(getattr(runner, "head_counts", None) or []))
    out["verify"] = verify(model, ctx, grid=GRID, batch=1, seed=3)["forward"]["max_rel_err"]
    out["qkv_bytes"] = ctx.comm_stats.as_dict().get("ulysses_qkv", 0)

    refused = {}
    for what, bad in (("heads", dataclasses.replace(plan, heads=dataclasses.replace(plan.heads, q_heads_per_rank=[6]))),
                      ("sequence", dataclasses.replace(plan, sequence=dataclasses.replace(plan.sequence,
                                                                                          tokens_per_rank=4)))):
        try:
            ShardedDiT(model, ParallelContext.from_plan(bad), grid=GRID)
            refused[what] = None
        except ValueError as exc:
            refused[what] = str(exc)
    out["refused"] = refused
    out["rank"] = dist.get_rank()
    return out


def test_runtime_follows_the_recorded_split_and_refuses_a_wrong_one():
    res = run_distributed(_rank, 2, timeout=120)
    r0, r1 = sorted(res, key=lambda r: r["rank"])
    assert r0["planned"] == (5, [3, 3])
    assert (r0["followed"], r1["followed"], r1["qkv_bytes"] == 2 * r0["qkv_bytes"]) == ((6, [4, 2]), (6, [4, 2]), True)
    assert max(r0["verify"], r1["verify"]) <= 1e-5
    # rank 0 sends rank 1's 2 heads (q, k, v); rank 1 sends rank 0's 4: twice the bytes,
    # where the contract's even split [3, 3] would send the same from both
    assert r0["qkv_bytes"] > 0 and r1["qkv_bytes"] == 2 * r0["qkv_bytes"]
    for r in (r0, r1):
        assert r["refused"]["heads"] and r["refused"]["heads"].startswith("plan.heads records")
        assert r["refused"]["sequence"] and r["refused"]["sequence"].startswith("plan.sequence records")
        assert all("\n" not in line for line in r["refused"].values())
