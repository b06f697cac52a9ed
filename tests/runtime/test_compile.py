"""Regional compilation (sporch.runtime.compile): compiled blocks agree with eager ones to float32
rounding, unsharded and on 2 real gloo ranks, with attention running outside compiled code.

Inductor generates C++ on CPU: the first test pays the compiler (tens of seconds on a cold
cache), hence ``slow``; the suite still runs them."""

from __future__ import annotations

import pytest
import torch

from sporch.runtime.testing import run_distributed

HALF_GRID = (2, 2, 4)  # 16 tokens
GRID = (2, 4, 4)  # 32 tokens: 16 per rank on a ring of 2
TOL = 1e-5  # relative, like sharded vs unsharded in float32


def _forward(model, ctx, grid, seed=3):
    from sporch.runtime.model import ShardedDiT, make_inputs

    inputs = make_inputs(model, grid, 1, seed, ctx)
    return ShardedDiT(model, ctx, grid=grid).forward(inputs.noise, 500.0, inputs.cond)


def _rel(a, b):
    return float((a - b).abs().max() / b.abs().max())


def _tiny(**over):
    from sporch.runtime.model import build_model, tiny_model_dict

    return build_model(tiny_model_dict("cross", **over), seed=7)


@pytest.mark.slow
def test_compiled_blocks_equal_eager_in_one_process():
    """Inductor-compiled Wan-style blocks against eager ones. The token grid gives the same
    per-block shapes as one rank of the 2-rank test below, whose compile then hits the cache."""
    from sporch.runtime.compile import compile_blocks

    model = _tiny()
    keys = list(model.state_dict())
    eager = [_forward(model, None, HALF_GRID, seed) for seed in (3, 4)]
    info = compile_blocks(model)
    assert info.enabled and info.blocks == 2 and info.backend == "inductor"
    assert list(model.state_dict()) == keys  # parameter names unchanged (checkpoints still load)
    compiled = [_forward(model, None, HALF_GRID, seed) for seed in (3, 4)]  # new inputs, same shapes
    for e, c in zip(eager, compiled):
        assert e.abs().max() > 0.1
        assert _rel(c, e) <= TOL
    assert compile_blocks(model).blocks == info.blocks  # idempotent


@pytest.mark.parametrize("kind,block", [("self", "blocks"), ("joint", "double_blocks"), ("joint", "single_blocks")])
def test_attention_runs_outside_the_compiled_region(kind, block):
    """A compiled block calls its attention argument eagerly (not traced by Dynamo), once per
    call, positional or with joint keywords. Dynamo's graph split is the same for every
    backend; ``eager`` skips code generation to keep this fast."""
    from sporch.runtime.compile import compile_blocks
    from sporch.runtime.model import build_model, tiny_model_dict
    from sporch.runtime.model.attention import SequenceAttention
    from sporch.runtime.model.rope import rope_cos_sin

    class Recording(SequenceAttention):
        def __call__(self, *args, **kwargs):
            calls.append(torch.compiler.is_compiling())
            return super().__call__(*args, **kwargs)

    calls: list[bool] = []
    model = build_model(tiny_model_dict(kind), seed=7)
    cfg = model.cfg
    n, d = 12, cfg.hidden
    g = torch.Generator().manual_seed(0)
    x, c = torch.randn(1, n, d, generator=g), torch.randn(1, d, generator=g)
    rope = rope_cos_sin(torch.arange(n), (1, 3, 4), cfg.head_dim)
    args = (x, c, rope) if kind == "self" else (x, torch.randn(1, cfg.text_len, d, generator=g), c, rope)
    blk = getattr(model, block)[0]
    with torch.no_grad():
        ref = blk(*args, Recording())
        compile_blocks(model, backend="eager")
        out = blk(*args, Recording())
        again = blk(*args, attn=Recording())
    assert calls == [False, False, False]
    for o, r in zip(*(t if isinstance(t, tuple) else (t,) for t in (out, ref))):
        assert _rel(o, r) <= TOL
    for o, r in zip(*(t if isinstance(t, tuple) else (t,) for t in (again, ref))):
        assert _rel(o, r) <= TOL


def test_compile_switch():
    from sporch.orchestrator.contract.sections import compile_off_reason
    from sporch.runtime.compile import compile_blocks
    from sporch.runtime.model import build_model, tiny_model_dict

    def compiles(option, device, shard_weights="none"):
        return compile_off_reason(option, shard_weights, on_gpu=device == "cuda") is None

    assert compiles(None, "cuda") and not compiles(None, "cpu")
    assert compiles(True, "cpu") and not compiles(False, "cuda")
    assert not compiles(True, "cuda", "sequence") and not compiles(None, "cuda", "world")
    info = compile_blocks(build_model(tiny_model_dict("cross"), seed=0), enabled=False)
    assert not info.enabled and info.blocks == 0 and "workload.compile" in info.reason
    assert info.record(0.1) == {"enabled": False, "blocks": 0, "backend": None, "mode": None,
                                "reason": info.reason, "first_call_s": None}


def _ranks():
    """Every rank: the sharded forward over ring=2, eager then compiled."""
    from sporch.runtime.compile import compile_blocks, time_first_call
    from sporch.runtime.parallel import ParallelContext

    ctx = ParallelContext.from_layout(ring=2)
    model = _tiny()
    eager = _forward(model, ctx, GRID)
    info = compile_blocks(model)
    compiled = time_first_call(info, lambda: _forward(model, ctx, GRID))
    reference = _forward(_tiny(), None, GRID)
    return {"compiled_vs_eager": _rel(compiled, eager), "compiled_vs_unsharded": _rel(compiled, reference),
            "record": info.record(0.0)}


@pytest.mark.slow
def test_compiled_blocks_on_two_gloo_ranks():
    for rank, res in enumerate(run_distributed(_ranks, 2, timeout=300)):
        assert res["compiled_vs_eager"] <= TOL, (rank, res)
        assert res["compiled_vs_unsharded"] <= TOL, (rank, res)
        assert res["record"]["enabled"] and res["record"]["first_call_s"] > 0 and res["record"]["compile_s"] > 0
