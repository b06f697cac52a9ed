"""The generic path with attention masks that drop keys (a short prompt's padded text tokens):
HunyuanVideo's ``encoder_attention_mask`` (its mask over [video, text] cut per rank by the shipped
plan's ``segments``), LTX-Video's text mask (a -10000 bias on cross-attention, split by its
``_cp_plan``) and Qwen-Image's ``encoder_hidden_states_mask`` (joint [text, image] mask), sharded
over 4 gloo ranks (U4, R4, U2R2, uneven heads, CFG parallel) == the same diffusers model
unsharded, float32, max abs error <= 1e-5. Rows of a batch drop different keys. ONE spawned world."""

from __future__ import annotations

import pytest

from sporch.runtime.testing import run_distributed

TOL = 1e-5
MASK_ARG = {"hunyuanvideo": "encoder_attention_mask", "ltx-video": "encoder_attention_mask",
            "qwen-image": "encoder_hidden_states_mask"}
# family, class, config overrides, layout, token grid [f, h, w], text tokens, valid text tokens per row
CASES = [
    ("hunyuanvideo", "HunyuanVideoTransformer3DModel", {}, dict(ulysses=4), (2, 2, 2), 8, (5,)),
    ("hunyuanvideo", "HunyuanVideoTransformer3DModel", {}, dict(ring=4), (1, 3, 3), 7, (3, 6)),
    ("hunyuanvideo", "HunyuanVideoTransformer3DModel", {}, dict(ulysses=2, ring=2), (2, 3, 5), 7, (2,)),
    ("hunyuanvideo", "HunyuanVideoTransformer3DModel", dict(num_attention_heads=3), dict(dp=2, ulysses=2),
     (1, 3, 3), 6, (4,)),
    ("ltx-video", "LTXVideoTransformer3DModel", {}, dict(ulysses=4), (2, 2, 4), 8, (5,)),
    ("ltx-video", "LTXVideoTransformer3DModel", {}, dict(ring=4), (3, 3, 1), 9, (2, 7)),
    ("ltx-video", "LTXVideoTransformer3DModel", {}, dict(ulysses=2, ring=2), (1, 3, 5), 7, (3,)),
    ("ltx-video", "LTXVideoTransformer3DModel", {}, dict(cfg=2, ulysses=2), (1, 3, 3), 6, (4, 2)),
    ("qwen-image", "QwenImageTransformer2DModel", {}, dict(ulysses=4), (1, 4, 4), 8, (5,)),
    ("qwen-image", "QwenImageTransformer2DModel", {}, dict(ring=4), (1, 3, 3), 7, (6, 3)),
    ("qwen-image", "QwenImageTransformer2DModel", {}, dict(ulysses=2, ring=2), (1, 3, 5), 7, (2,)),
]


def label(case) -> str:
    fam, _, over, layout, grid, text, valid = case
    lay = "".join(f"{k[0].upper()}{v}" for k, v in layout.items())
    heads = f"-{over['num_attention_heads']}heads" if over else ""
    return f"{fam}-{lay}{heads}-{'x'.join(map(str, grid))}+{text}-valid{'.'.join(map(str, valid))}"


def _world(cases):
    import torch

    from sporch.runtime.models.build import random_diffusers

    from sporch.runtime.models.runner import verify_model
    from sporch.runtime.models.families import family_module
    from sporch.runtime.parallel import ParallelContext

    out = {}
    for case in cases:
        fam, cls, over, layout, grid, text, valid = case
        ctx = ParallelContext.from_layout(**layout)
        mod = family_module(fam)
        config = {**mod.TINY, **over}
        model = random_diffusers(cls, config, seed=3)
        inputs = mod.inputs(config, batch=len(valid), grid=grid, text_len=text,
                            generator=torch.Generator().manual_seed(5))
        mask = torch.zeros(len(valid), text)
        for row, n in enumerate(valid):
            mask[row, :n] = 1.0  # the prompt's tokens, then padding
        masked = {**inputs, MASK_ARG[fam]: mask}
        res = verify_model(model, ctx, masked, batched=mod.BATCHED + (MASK_ARG[fam],))
        with torch.no_grad():  # how much the dropped keys move the output (else the test proves nothing)
            res["mask_effect"] = float((model(**masked)[0] - model(**{**masked, MASK_ARG[fam]: torch.ones_like(mask)})[0])
                                       .abs().max())
        out[label(case)] = res
        ctx.close()
    return out


@pytest.fixture(scope="module")
def results():
    return run_distributed(_world, 4, CASES, timeout=600)


@pytest.mark.parametrize("case", CASES, ids=label)
def test_masked_sharded_equals_unsharded(results, case):
    name = label(case)
    for rank, res in enumerate(results):
        r = res[name]
        assert r["mask_effect"] > 1000 * TOL, f"{name}: the mask barely moves the output; the test proves nothing"
        assert r["max_abs_err"] <= TOL, f"{name} rank {rank}: max abs error {r['max_abs_err']:.3g} > {TOL}"


def test_masks_the_sharded_path_cannot_honour_are_refused():
    """A mask over another key count than the rank holds, one that differs per query, and an
    additive bias are refused by name (never silently ignored)."""
    import torch

    from sporch.runtime.models.sequence_parallel import key_keep

    keep = key_keep(torch.tensor([[0.0, -10000.0, 0.0]]).view(1, 1, 1, 3), 1, 3)
    assert keep.tolist() == [[True, False, True]]
    assert key_keep(torch.tensor([[True, False]]).view(1, 1, 2), 1, 2).tolist() == [[True, False]]
    with pytest.raises(NotImplementedError, match="for 3 local keys"):
        key_keep(torch.ones(1, 1, 1, 5, dtype=torch.bool), 1, 3)
    with pytest.raises(NotImplementedError, match="differs between queries"):
        key_keep(torch.eye(3, dtype=torch.bool).view(1, 1, 3, 3), 1, 3)
    with pytest.raises(NotImplementedError, match="additive bias"):
        key_keep(torch.tensor([0.0, -1.5, 0.0]).view(1, 1, 1, 3), 1, 3)
