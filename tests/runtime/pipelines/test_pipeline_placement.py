"""Issue 18 items 2 and 3 at the runtime: the text encoders sharded with FSDP2 over a sequence
group (``pipeline.text_encoder: sharded``) give the leader's encoding, each rank holding a
quarter of them; diffusers' tiled decode (``pipeline.vae: tiled``) is what runs.

The whole generate path with these placements (and ``pipeline.vae: parallel``) is compared
with diffusers' pipelines in test_generate.py.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

pytest.importorskip("diffusers")

from sporch.orchestrator.config.cluster import find_cluster  # noqa: E402
from sporch.orchestrator.config.job import job_from_dict  # noqa: E402
from sporch.orchestrator.plan.planner import make_plan  # noqa: E402
from sporch.runtime.testing import run_distributed  # noqa: E402

from .test_generate import FLUX_MODEL, FLUX_WORKLOAD, WAN_WORKLOAD  # noqa: E402

PROMPTS = ["a red fox running in snow", "a small boat on the sea at sunset"]
# float32: the sharded encoders compute the same sums on gathered weights; measured 0.0
ENCODE_TOL = 1e-5


def _plan(model: dict, workload: dict, **pipeline):
    job = job_from_dict({"name": "p", "model": model, "workload": {**workload, "prompt": "x"},
                         "parallel": {"ulysses": 2, "ring": 2}, "pipeline": pipeline})
    return make_plan(find_cluster("local"), job)


@pytest.fixture(scope="module")
def folders(tmp_path_factory):
    from sporch.runtime.pipelines.tiny import save_tiny_pipeline

    root = tmp_path_factory.mktemp("placement")
    save_tiny_pipeline("wan", root / "wan", _plan({"preset": "tiny"}, WAN_WORKLOAD).model, seed=1)
    save_tiny_pipeline("flux", root / "flux", _plan(FLUX_MODEL, FLUX_WORKLOAD).model, seed=2)
    return root


def _flat(cond) -> torch.Tensor:
    return cond if isinstance(cond, torch.Tensor) else torch.cat([v.flatten() for v in cond.values()])


def _encode_both(cases):
    """Per case: the encoding sharded over the sequence group (4 ranks) and the plain one, and
    the share of the encoders' parameters this rank holds; plus a 3-layer umT5 run alone."""
    from torch.distributed.device_mesh import DeviceMesh
    from torch.distributed.tensor import DTensor
    from transformers import UMT5Config, UMT5EncoderModel

    from sporch.orchestrator.contract.plan import Plan
    from sporch.runtime.parallel import ParallelContext
    from sporch.runtime.pipelines.params import generate_params
    from sporch.runtime.pipelines.text import ENCODER_NAMES, encode, load_sharded_text_pipeline, shard_encoder

    cpu = torch.device("cpu")
    out = {}
    for name, plan_json in cases:
        plan = Plan.from_json(plan_json)
        ctx = ParallelContext.from_plan(plan)
        params = generate_params(plan)
        cfg = params.family == "wan"
        sharded, sharded_null = encode(params, PROMPTS, cpu, torch.float32, cfg, ctx)
        plain, plain_null = encode(params, PROMPTS, cpu, torch.float32, cfg)
        pipe = load_sharded_text_pipeline(params.root, torch.float32, cpu, ctx)
        held = total = 0
        for enc in filter(None, (getattr(pipe, n, None) for n in ENCODER_NAMES)):
            for p in enc.parameters():
                total += p.numel()
                held += p.to_local().numel() if isinstance(p, DTensor) else p.numel()
        out[name] = {"err": float((_flat(sharded) - _flat(plain)).abs().max()),
                     "null_err": float((_flat(sharded_null) - _flat(plain_null)).abs().max()) if cfg else 0.0,
                     "scale": float(_flat(plain).abs().max()), "held": held, "total": total}
    # three layers: the prefetch of the next layer and the tied embedding tables in one unit
    torch.manual_seed(0)
    t5 = UMT5EncoderModel(UMT5Config(vocab_size=64, d_model=32, d_kv=8, d_ff=64, num_layers=3, num_heads=4,
                                     relative_attention_num_buckets=8, pad_token_id=0, eos_token_id=1)).eval()
    ids = torch.randint(0, 64, (2, 7), generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        want = t5(ids).last_hidden_state
        shard_encoder(t5, DeviceMesh.from_group(torch.distributed.group.WORLD, "cpu"))
        got = t5(ids).last_hidden_state
    out["umt5-3-layers"] = {"err": float((got - want).abs().max()), "null_err": 0.0, "scale": float(want.abs().max()),
                            "held": sum(p.to_local().numel() for p in t5.parameters()),
                            "total": sum(p.numel() for p in t5.parameters())}
    return out


def test_sharded_text_encoders_give_the_leaders_encoding(folders):
    cases = [("wan", _plan({"preset": "tiny", "weights": str(folders / "wan")}, WAN_WORKLOAD,
                           text_encoder="sharded")),
             ("flux", _plan({**FLUX_MODEL, "weights": str(folders / "flux")}, FLUX_WORKLOAD, text_encoder="sharded"))]
    for _, plan in cases:
        assert (plan.placement.text_encoder, plan.placement.pipeline_degree) == ("sharded", 4)
    ranks = run_distributed(_encode_both, 4, [(n, p.to_json()) for n, p in cases], timeout=600)
    for name in ("wan", "flux", "umt5-3-layers"):
        for rank, r in enumerate(ranks):
            got = r[name]
            assert got["scale"] > 0.1, name  # a real encoding, not zeros
            assert got["err"] <= ENCODE_TOL and got["null_err"] <= ENCODE_TOL, (name, rank, got)
            # each rank keeps a quarter of every parameter (rows split 4 ways, rounded up)
            assert got["held"] <= got["total"] / 4 + got["total"] * 0.05, (name, rank, got)
        assert sum(r[name]["held"] for r in ranks) >= ranks[0][name]["total"]


def test_tiled_decode_is_diffusers_tiling(folders):
    """``tiled`` runs diffusers' own tiled decode (equal to calling it directly), and a frame
    that fits in one tile decodes exactly as a whole. Tiles do not equal the whole decode in
    general: each tile's attention and zero padding see only the tile, and the seams are
    blended; on this random VAE that moves pixels by up to ~0.5 (on the published VAE, trained
    smooth, the seams are not visible), so no tolerance is claimed against the whole decode."""
    from sporch.runtime.pipelines.params import generate_params
    from sporch.runtime.pipelines.vae import Decoder

    plan = _plan({"preset": "tiny", "weights": str(folders / "wan")}, WAN_WORKLOAD, vae="tiled")
    params = generate_params(plan)
    assert params.vae == "tiled"
    tiled, whole = Decoder(params, torch.device("cpu"), placement="tiled"), Decoder(params, torch.device("cpu"))
    assert tiled.pipe.vae.use_tiling and not whole.pipe.vae.use_tiling
    z = torch.randn(1, 4, 3, 10, 6, generator=torch.Generator().manual_seed(0))  # 80 x 48 px: one tile
    assert (tiled(z) == whole(z)).all()
    vae = tiled.pipe.vae
    vae.tile_sample_min_height = vae.tile_sample_min_width = 64  # 160 x 128 px in 64-px tiles
    vae.tile_sample_stride_height = vae.tile_sample_stride_width = 48
    big = torch.randn(1, 4, 2, 20, 16, generator=torch.Generator().manual_seed(1))
    ours = tiled(big)
    with torch.no_grad():
        c = vae.config.z_dim
        mean = torch.tensor(vae.config.latents_mean).view(1, c, 1, 1, 1)
        inv_std = 1.0 / torch.tensor(vae.config.latents_std).view(1, c, 1, 1, 1)  # as WanPipeline
        direct = vae.tiled_decode(big / inv_std + mean, return_dict=False)[0]
    direct = tiled.pipe.video_processor.postprocess_video(direct, output_type="np")
    assert abs(ours - direct).max() == 0
    assert abs(ours - whole(big)).max() > 1e-3  # it did tile
