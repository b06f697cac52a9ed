"""``CfgTwoCalls`` (runtime/models/cfg_two_calls.py) on one process: which cfg rank computes
which of a step's two calls (read from the pipeline's cache context, or from their order where the
pipeline opens none: Lumina2Pipeline), the placeholder the other
rank returns, and the call orders it refuses in one line before any collective (the exchange runs
in 4- and 2-rank worlds: tests/runtime/pipelines/test_generate_generic.py's cfg 2 x U2 Qwen-Image
generate, test_generate_generic_resume.py's cfg 2 resume, test_generate_image_families.py's cfg 2 x U2
CogView4 and Lumina 2 generate)."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
import torch

pytest.importorskip("diffusers")

from sporch.runtime.models.build import random_diffusers  # noqa: E402
from sporch.runtime.models.cfg_two_calls import CfgTwoCalls  # noqa: E402
from sporch.runtime.models.families import family_module  # noqa: E402


@pytest.fixture(scope="module")
def model():
    return random_diffusers("QwenImageTransformer2DModel", family_module("qwen-image").TINY, seed=3)


def _inputs(model) -> dict:
    return family_module("qwen-image").inputs(model.config, batch=1, grid=(1, 2, 3), text_len=4,
                                              generator=torch.Generator().manual_seed(0))


def _passes(model) -> tuple[list, object]:
    seen: list = []
    return seen, model.transformer_blocks[0].register_forward_pre_hook(lambda m, a: seen.append(1))


@pytest.mark.parametrize("rank", [0, 1])
def test_the_cond_call_runs_on_cfg_rank_0_and_returns_a_placeholder_on_rank_1(model, rank):
    """A step's first call ("cond"): cfg rank 0 computes it (the model's own output), cfg rank 1
    runs no block and returns a NaN placeholder of the hidden states' shape, as the call asked
    (``return_dict=False``: a tuple); a last "cond" without its "uncond" is refused on leaving."""
    kw = _inputs(model)
    seen, handle = _passes(model)
    try:
        with torch.no_grad(), pytest.raises(ValueError, match='last "cond" transformer call had no "uncond" call'):
            with CfgTwoCalls(model, SimpleNamespace(cfg=2, cfg_rank=rank)) as two:
                with model.cache_context("cond"):
                    (out,) = model(**kw)
                assert two.pending
    finally:
        handle.remove()
    assert out.shape == kw["hidden_states"].shape and len(seen) == (rank == 0)
    if rank == 0:
        assert torch.isfinite(out).all()
        assert torch.equal(out, model(**kw)[0])  # the model's own prediction (hook detached)
    else:
        assert torch.isnan(out).all()


@pytest.mark.parametrize("order, needle", [
    (("uncond",), 'an "uncond" transformer call without a "cond" call before it'),
    (("cond", "cond"), 'two "cond" transformer calls without an "uncond" call between them'),
    ((None,), 'last "cond" transformer call had no "uncond" call'),  # no context: the first of a pair is "cond"
    ((None, "cond"), 'two "cond" transformer calls without an "uncond" call between them'),
    (("cond_uncond",), "this call's context is 'cond_uncond'"),
])
def test_calls_out_of_order_are_refused_in_one_line(model, order, needle):
    kw = _inputs(model)
    with torch.no_grad(), pytest.raises(ValueError, match=needle) as exc:
        with CfgTwoCalls(model, SimpleNamespace(cfg=2, cfg_rank=1)):
            for name in order:
                if name is None:
                    model(**kw)
                else:
                    with model.cache_context(name):
                        model(**kw)
    assert "\n" not in str(exc.value)
    assert not hasattr(model, "_diffusers_hook") or "sporch_cfg_two_calls" not in model._diffusers_hook.hooks


def test_a_cfg_group_other_than_2_is_refused(model):
    with pytest.raises(ValueError, match="cfg group of 2; this context has cfg 1"):
        CfgTwoCalls(model, SimpleNamespace(cfg=1, cfg_rank=0))
