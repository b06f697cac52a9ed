"""The generic path: diffusers transformers of every family with a split plan, sharded over 4 gloo
ranks (U4, R4, U2R2 and uneven heads / token counts) == the same diffusers model unsharded,
float32, max abs error <= 1e-5. All families and layouts run in ONE spawned world."""

from __future__ import annotations

import pytest

from sporch.runtime.testing import run_distributed

TOL = 1e-5
# family, class, config overrides, layout, token grid [f, h, w], text tokens, batch
CASES = [
    ("qwen-image", "QwenImageTransformer2DModel", {}, dict(ulysses=4), (1, 4, 4), 8, 1),
    ("qwen-image", "QwenImageTransformer2DModel", {}, dict(ring=4), (1, 3, 3), 5, 2),
    ("qwen-image", "QwenImageTransformer2DModel", {}, dict(ulysses=2, ring=2), (1, 3, 5), 7, 1),
    ("qwen-image", "QwenImageTransformer2DModel", dict(num_attention_heads=3), dict(dp=2, ulysses=2), (1, 3, 3), 5, 1),
    ("ltx-video", "LTXVideoTransformer3DModel", {}, dict(ulysses=4), (2, 2, 4), 8, 1),
    ("ltx-video", "LTXVideoTransformer3DModel", {}, dict(ring=4), (3, 3, 1), 6, 2),
    ("ltx-video", "LTXVideoTransformer3DModel", {}, dict(ulysses=2, ring=2), (1, 3, 5), 7, 1),
    ("ltx-video", "LTXVideoTransformer3DModel", dict(num_attention_heads=6, cross_attention_dim=48), dict(ulysses=4), (2, 3, 3), 5, 1),
    ("wan", "WanTransformer3DModel", {}, dict(ulysses=4), (2, 2, 2), 8, 1),
    ("wan", "WanTransformer3DModel", {}, dict(ring=4), (1, 3, 3), 5, 1),
    ("wan", "WanTransformer3DModel", {}, dict(ulysses=2, ring=2), (3, 1, 3), 5, 2),
    ("wan", "WanTransformer3DModel", dict(num_attention_heads=3), dict(dp=2, ulysses=2), (1, 3, 3), 5, 1),
    ("flux", "FluxTransformer2DModel", {}, dict(ulysses=4), (1, 4, 4), 8, 1),
    ("flux", "FluxTransformer2DModel", {}, dict(ring=4), (1, 3, 3), 5, 2),
    ("flux", "FluxTransformer2DModel", {}, dict(ulysses=2, ring=2), (1, 3, 5), 7, 1),
    ("flux", "FluxTransformer2DModel", dict(num_attention_heads=3), dict(dp=2, ulysses=2), (1, 3, 3), 5, 1),
    # CFG parallel: the doubled batch (cond, uncond) split over cfg 2, each half on Ulysses 2
    ("qwen-image", "QwenImageTransformer2DModel", {}, dict(cfg=2, ulysses=2), (1, 3, 3), 5, 2),
    ("ltx-video", "LTXVideoTransformer3DModel", {}, dict(cfg=2, ulysses=2), (1, 3, 3), 5, 2),
    ("wan", "WanTransformer3DModel", {}, dict(cfg=2, ulysses=2), (1, 3, 3), 5, 2),
    # shipped plans (the class has no _cp_plan); SD3.5 Medium's dual attention in block 0
    ("sd3", "SD3Transformer2DModel", {}, dict(ulysses=4), (1, 4, 4), 8, 1),
    ("sd3", "SD3Transformer2DModel", {}, dict(ring=4), (1, 3, 3), 5, 2),
    ("sd3", "SD3Transformer2DModel", {}, dict(ulysses=2, ring=2), (1, 3, 5), 7, 1),
    ("sd3", "SD3Transformer2DModel", dict(num_attention_heads=3, caption_projection_dim=24), dict(dp=2, ulysses=2),
     (1, 3, 3), 5, 1),
    ("sd3", "SD3Transformer2DModel", {}, dict(cfg=2, ulysses=2), (1, 3, 3), 5, 2),
    # CogVideoX: text concatenated with video tokens, RoPE tables split per block
    ("cogvideox", "CogVideoXTransformer3DModel", {}, dict(ulysses=4), (2, 2, 2), 8, 1),
    ("cogvideox", "CogVideoXTransformer3DModel", {}, dict(ring=4), (1, 3, 3), 5, 2),
    ("cogvideox", "CogVideoXTransformer3DModel", {}, dict(ulysses=2, ring=2), (2, 3, 5), 7, 1),
    ("cogvideox", "CogVideoXTransformer3DModel", dict(num_attention_heads=3), dict(dp=2, ulysses=2), (1, 3, 3), 5,
     1),
    ("cogvideox", "CogVideoXTransformer3DModel", {}, dict(cfg=2, ulysses=2), (1, 3, 3), 5, 2),
    # HunyuanVideo: dual- then single-stream blocks, the token refiner's attention local
    ("hunyuanvideo", "HunyuanVideoTransformer3DModel", {}, dict(ulysses=4), (2, 2, 2), 8, 1),
    ("hunyuanvideo", "HunyuanVideoTransformer3DModel", {}, dict(ring=4), (1, 3, 3), 5, 2),
    ("hunyuanvideo", "HunyuanVideoTransformer3DModel", {}, dict(ulysses=2, ring=2), (2, 3, 5), 7, 1),
    ("hunyuanvideo", "HunyuanVideoTransformer3DModel", dict(num_attention_heads=3), dict(dp=2, ulysses=2), (1, 3, 3),
     5, 1),
    # PixArt-Sigma: image tokens split after the patch embedding, cross-attention to the whole text local
    ("pixart", "PixArtTransformer2DModel", {}, dict(ulysses=4), (1, 4, 4), 8, 1),
    ("pixart", "PixArtTransformer2DModel", {}, dict(ring=4), (1, 3, 3), 5, 2),
    ("pixart", "PixArtTransformer2DModel", {}, dict(ulysses=2, ring=2), (1, 3, 5), 7, 1),
    ("pixart", "PixArtTransformer2DModel", dict(num_attention_heads=3, cross_attention_dim=24), dict(dp=2, ulysses=2),
     (1, 3, 3), 5, 1),
    ("pixart", "PixArtTransformer2DModel", {}, dict(cfg=2, ulysses=2), (1, 3, 3), 5, 2),
    # PixArt-Alpha 1024's resolution / aspect-ratio conditions (added_cond_kwargs, a dict CFG parallel cuts entry by
    # entry; a width 3 divides), 15 tokens, cfg 2 x U2
    ("pixart", "PixArtTransformer2DModel", dict(use_additional_conditions=True, attention_head_dim=6,
                                                cross_attention_dim=24), dict(cfg=2, ulysses=2), (1, 3, 5), 6, 2),
]


def label(case) -> str:
    fam, _, over, layout, grid, text, batch = case
    lay = "".join(f"{k[0].upper()}{v}" for k, v in layout.items())
    heads = f"-{over['num_attention_heads']}heads" if "num_attention_heads" in over else "-added-cond" if over else ""
    return f"{fam}-{lay}{heads}-{'x'.join(map(str, grid))}+{text}"


def zero_attention():
    """A torch function mode under which every SDPA call returns zeros."""
    import torch
    import torch.nn.functional as F
    from torch.overrides import TorchFunctionMode

    class Zero(TorchFunctionMode):
        def __torch_function__(self, func, types, args=(), kwargs=None):
            kwargs = kwargs or {}
            if func is F.scaled_dot_product_attention:
                q = kwargs["query"] if "query" in kwargs else args[0]
                return torch.zeros_like(q)
            return func(*args, **kwargs)
    return Zero()


def _world(cases):
    import torch

    from sporch.runtime.models.build import random_diffusers

    from sporch.runtime.models.runner import verify_model
    from sporch.runtime.models.families import family_module
    from sporch.runtime.parallel import ParallelContext

    out = {}
    for case in cases:
        fam, cls, over, layout, grid, text, batch = case
        ctx = ParallelContext.from_layout(**layout)
        mod = family_module(fam)
        config = {**mod.TINY, **over}
        model = random_diffusers(cls, config, seed=3)
        inputs = mod.inputs(config, batch=batch, grid=grid, text_len=text,
                            generator=torch.Generator().manual_seed(5))
        res = verify_model(model, ctx, inputs, batched=mod.BATCHED)
        with torch.no_grad():  # how much attention moves the output (else the comparison proves nothing)
            ref = model(**inputs)[0]
            with zero_attention():
                res["attention_effect"] = float((model(**inputs)[0] - ref).abs().max())
        out[label(case)] = res
        ctx.close()
    return out


@pytest.fixture(scope="module")
def results():
    return run_distributed(_world, 4, CASES, timeout=600)


@pytest.mark.parametrize("case", CASES, ids=label)
def test_sharded_equals_unsharded(results, case):
    name = label(case)
    for rank, res in enumerate(results):
        r = res[name]
        assert r["attention_effect"] > 1000 * TOL, f"{name}: attention barely moves the output; the test proves nothing"
        assert r["max_abs_err"] <= TOL, f"{name} rank {rank}: max abs error {r['max_abs_err']:.3g} > {TOL}"


def test_unsupported_class_is_refused():
    from sporch.orchestrator.models.families import UnsupportedClass
    from sporch.runtime.models.build import diffusers_class

    with pytest.raises(UnsupportedClass, match="'SanaTransformer2DModel' is not supported"):
        diffusers_class("SanaTransformer2DModel")


@pytest.mark.parametrize("fam, cls, over", [
    ("ltx-video", "LTXVideoTransformer3DModel", ["parallel.ulysses=4", "workload.height=96", "workload.width=160"]),
    ("qwen-image", "QwenImageTransformer2DModel", ["parallel.ulysses=2", "parallel.ring=2", "workload.height=48",
                                                   "workload.width=80"]),
])
def test_sporch_run_local_verify_on_a_tiny_folder(tmp_path, fam, cls, over):
    """`sporch run --local --verify model.weights=DIR`, no preset: a diffusers pipeline folder of a
    family planned from its config.json, 4 gloo ranks against the unsharded model (15 tokens: uneven).
    The real launches of this path (a cross-attention video family, a joint-attention image one); the
    other families run the same point on the pool's ranks (tests/runtime/models/tiny_folder.py)."""
    from sporch.runtime.models.families import family_module
    from tests.runtime.models.tiny_folder import launch_verify

    metrics = launch_verify(tmp_path, cls, family_module(fam).TINY, over)["metrics"]
    assert metrics["family"] == fam and metrics["path"] == "diffusers"
    assert metrics["ok"] and metrics["max_abs_err"] <= TOL and metrics["forward"]["ref_max_abs"] > 1e-3
