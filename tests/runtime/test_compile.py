"""Regional compilation (sporch.runtime.compile) of a diffusers transformer: compiled blocks agree
with eager ones to float32 rounding, unsharded and on 2 real gloo ranks, with the routed
attention (USP) running outside compiled code.

Inductor generates C++ on CPU: the first test pays the compiler (tens of seconds on a cold
cache), hence ``slow``; the suite still runs them."""

from __future__ import annotations

import pytest
import torch

pytest.importorskip("diffusers")

from sporch.runtime.testing import run_distributed  # noqa: E402

GRID = (2, 4, 4)  # 32 tokens: 16 per rank on a ring of 2
TOL = 1e-5  # relative, like sharded vs unsharded in float32


def _rel(a, b):
    return float((a - b).abs().max() / b.abs().max())


def _tiny():
    from sporch.runtime.models.build import random_diffusers
    from sporch.runtime.models.families.wan import TINY

    return random_diffusers("WanTransformer3DModel", dict(TINY), seed=7)


def _inputs(seed: int = 3):
    from sporch.runtime.models.families.wan import TINY, inputs

    return inputs(TINY, batch=1, grid=GRID, text_len=5, generator=torch.Generator().manual_seed(seed))


def _forward(model, ctx, seed=3):
    from sporch.runtime.models.runner import ShardedTransformer

    with torch.no_grad():
        return ShardedTransformer(model, ctx).forward(**_inputs(seed))


@pytest.mark.slow
def test_compiled_blocks_equal_eager_in_one_process():
    from sporch.runtime.compile import compile_blocks

    model = _tiny()
    keys = list(model.state_dict())
    eager = [_forward(model, None, seed) for seed in (3, 4)]
    info = compile_blocks(model)
    assert info.enabled and info.blocks == 2 and info.backend == "inductor"
    assert list(model.state_dict()) == keys  # parameter names unchanged (checkpoints still load)
    compiled = [_forward(model, None, seed) for seed in (3, 4)]  # new inputs, same shapes
    for e, c in zip(eager, compiled):
        assert e.abs().max() > 0.1
        assert _rel(c, e) <= TOL
    assert compile_blocks(model).blocks == info.blocks  # idempotent


def _attention_calls():
    """The routed attention of a compiled block on 2 ranks runs eagerly: Dynamo never traces it.
    Recorded where ``SequenceParallel.attention`` calls USP (the module's ``usp_attention``, put
    back after), so the method under test is the one the blocks reach."""
    import sporch.runtime.models.sequence_parallel as sequence_parallel
    from sporch.runtime.compile import compile_blocks
    from sporch.runtime.models.split_plans import split_plan
    from sporch.runtime.parallel import ParallelContext

    calls: list[bool] = []
    original = sequence_parallel.usp_attention

    def recording(*args, **kwargs):
        calls.append(torch.compiler.is_compiling())
        return original(*args, **kwargs)

    ctx = ParallelContext.from_layout(ulysses=2)
    model = _tiny()
    compile_blocks(model, backend="eager")  # Dynamo's graph split is the same for every backend
    sequence_parallel.usp_attention = recording
    try:
        with torch.no_grad(), sequence_parallel.SequenceParallel(model, ctx, split_plan(type(model))):
            model(**_inputs())
    finally:
        sequence_parallel.usp_attention = original
    ctx.close()
    return calls


def test_attention_runs_outside_the_compiled_region():
    for calls in run_distributed(_attention_calls, 2, timeout=300):
        assert calls and not any(calls), calls  # every self-attention call, none while compiling


def test_compile_switch():
    from sporch.orchestrator.contract.sections import compile_off_reason
    from sporch.runtime.compile import compile_blocks

    def compiles(option, device, shard_weights="none"):
        return compile_off_reason(option, shard_weights, on_gpu=device == "cuda") is None

    assert compiles(None, "cuda") and not compiles(None, "cpu")
    assert compiles(True, "cpu") and not compiles(False, "cuda")
    assert not compiles(True, "cuda", "sequence") and not compiles(None, "cuda", "world")
    info = compile_blocks(_tiny(), enabled=False)
    assert not info.enabled and info.blocks == 0 and "workload.compile" in info.reason
    assert info.record(0.1) == {"enabled": False, "blocks": 0, "backend": None, "mode": None,
                                "reason": info.reason, "first_call_s": None}


def _ranks():
    """Every rank: the sharded forward over ring=2, eager then compiled."""
    from sporch.runtime.compile import compile_blocks, time_first_call
    from sporch.runtime.parallel import ParallelContext

    ctx = ParallelContext.from_layout(ring=2)
    model = _tiny()
    eager = _forward(model, ctx)
    info = compile_blocks(model)
    compiled = time_first_call(info, lambda: _forward(model, ctx))
    reference = _forward(_tiny(), None)
    return {"compiled_vs_eager": _rel(compiled, eager), "compiled_vs_unsharded": _rel(compiled, reference),
            "record": info.record(0.0)}


@pytest.mark.slow
def test_compiled_blocks_on_two_gloo_ranks():
    for rank, res in enumerate(run_distributed(_ranks, 2, timeout=300)):
        assert res["compiled_vs_eager"] <= TOL, (rank, res)
        assert res["compiled_vs_unsharded"] <= TOL, (rank, res)
        assert res["record"]["enabled"] and res["record"]["first_call_s"] > 0 and res["record"]["compile_s"] > 0
