"""The generic path's hooks are registered once per model, so a compiled forward compiles once:
tiny PixArt-Sigma and LTX-Video, their blocks compiled (Dynamo, a backend that counts the graphs it
is handed), run sharded over 2 gloo ranks (Ulysses 2) by ``ShardedTransformer`` forward after forward.

Before, ``SequenceParallel`` registered its hooks anew on every forward; a compiled block guards on
the ids of the hooks its call runs, so every forward recompiled PixArt's blocks (until Dynamo's
recompile limit left them eager). Here: no graph after the first forward, the same hooks on the
model after every forward (and for a second runner on the same model), the outputs those of the
eager sharded forward (exactly) and of the unsharded model (float32, <= 1e-5), and the model, the
``with`` left, the unsharded model again (exactly); a second ``SequenceParallel`` entered on the
model while one is entered is refused, and ``SequenceParallel.remove`` takes the hooks off."""

from __future__ import annotations

import pytest

from sporch.runtime.testing import run_distributed

CASES = [("pixart", "PixArtTransformer2DModel", (1, 4, 4)), ("ltx-video", "LTXVideoTransformer3DModel", (2, 2, 4))]
CALLS = 5
TOL = 1e-5


def _hooks(model) -> int:
    return sum(len(m._forward_pre_hooks) + len(m._forward_hooks) for m in model.modules())


def _world(cases, calls):
    import torch
    import torch._dynamo

    from sporch.runtime.compile import compile_blocks
    from sporch.runtime.models.runner import ShardedTransformer
    from sporch.runtime.models.build import random_diffusers
    from sporch.runtime.models.families import family_module
    from sporch.runtime.models.sequence_parallel import SequenceParallel
    from sporch.runtime.parallel import ParallelContext

    graphs: list = []

    def counting(gm, example_inputs):
        graphs.append(gm)
        return gm.forward

    out = {}
    ctx = ParallelContext.from_layout(ulysses=2)
    for fam, cls, grid in cases:
        mod = family_module(fam)
        config = dict(mod.TINY)
        model = random_diffusers(cls, config, seed=3)
        inputs = mod.inputs(config, batch=1, grid=grid, text_len=8, generator=torch.Generator().manual_seed(5))
        with torch.no_grad():
            ref = model(**inputs)[0]
        runner = ShardedTransformer(model, ctx, batched=mod.BATCHED)
        eager = runner.forward(**inputs)
        hooks_first = _hooks(model)
        torch._dynamo.reset()
        graphs.clear()
        compile_blocks(model, backend=counting)
        per_call, diffs = [], []
        for _ in range(calls):
            before = len(graphs)
            diffs.append(float((runner.forward(**inputs) - eager).abs().max()))
            per_call.append(len(graphs) - before)
        hooks_last = _hooks(model)
        before = len(graphs)
        again = ShardedTransformer(model, ctx, batched=mod.BATCHED).forward(**inputs)  # verify builds one per call
        second_runner_graphs = len(graphs) - before
        with torch.no_grad():
            plain = model(**inputs)[0]  # outside the with: the hooks are inert
        out[fam] = {"per_call": per_call, "second_runner_graphs": second_runner_graphs, "hooks_first": hooks_first,
                    "hooks_last": hooks_last, "hooks_end": _hooks(model), "compiled_vs_eager": max(diffs),
                    "second_runner_vs_eager": float((again - eager).abs().max()),
                    "sharded_vs_unsharded": float((eager - ref).abs().max()),
                    "plain_after_vs_before": float((plain - ref).abs().max())}
        try:  # one SequenceParallel on a model at a time
            with runner.sequence, ShardedTransformer(model, ctx).sequence:
                pass
            out[fam]["nested_refused"] = False
        except RuntimeError:
            out[fam]["nested_refused"] = True
        SequenceParallel.remove(model)
        out[fam]["hooks_removed"] = _hooks(model)
        torch._dynamo.reset()
    ctx.close()
    return out


@pytest.fixture(scope="module")
def results():
    return run_distributed(_world, 2, CASES, CALLS, timeout=300)


@pytest.mark.parametrize("fam", [c[0] for c in CASES])
def test_compiled_forward_compiles_once(results, fam):
    for rank in results:
        r = rank[fam]
        assert r["per_call"][0] > 0, r  # the first forward compiles the blocks (the counter sees them)
        assert r["per_call"][1:] == [0] * (CALLS - 1), f"graphs built per forward {r['per_call']}: recompiles"
        assert r["second_runner_graphs"] == 0, r


@pytest.mark.parametrize("fam", [c[0] for c in CASES])
def test_hooks_registered_once(results, fam):
    for rank in results:
        r = rank[fam]
        assert r["hooks_first"] > 0 and r["hooks_first"] == r["hooks_last"] == r["hooks_end"], r
        assert r["nested_refused"] and r["hooks_removed"] == 0, r


@pytest.mark.parametrize("fam", [c[0] for c in CASES])
def test_outputs_unchanged(results, fam):
    for rank in results:
        r = rank[fam]
        assert r["compiled_vs_eager"] == 0.0 and r["second_runner_vs_eager"] == 0.0, r
        assert r["sharded_vs_unsharded"] <= TOL, r
        assert r["plain_after_vs_before"] == 0.0, r
