"""Issue 18 item 2 at the runtime: the text encoders sharded with FSDP2 over a sequence group
(``pipeline.text_encoder: sharded``) give the leader's encoding, each rank holding a quarter of
them: Wan's umT5, Flux.1's CLIP and T5, through the pipelines' own ``encode_prompt``.

The whole generate path with these placements (and ``pipeline.vae: parallel``, ``tiled``) is
compared with diffusers' pipelines in test_generate.py and test_generate_generic_tiled.py.
"""

from __future__ import annotations


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
    for family, model, seed in (("wan", _plan({"preset": "tiny"}, WAN_WORKLOAD).model, 1),
                                ("flux", _plan(FLUX_MODEL, FLUX_WORKLOAD).model, 2)):
        save_tiny_pipeline(family, root / family, seed=seed, config=model.diffusers_config, text_len=model.text_len,
                          vae_stride=tuple(model.vae_stride))
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
    from sporch.orchestrator.models.families import get_family
    from sporch.runtime.parallel import ParallelContext
    from sporch.runtime.pipelines.load import load_pipeline
    from sporch.runtime.pipelines.prompts import encode, text_encoders
    from sporch.runtime.pipelines.params import generate_params
    from sporch.runtime.pipelines.text import shard_encoder, shard_text_encoders

    cpu = torch.device("cpu")
    out = {}
    for name, plan_json in cases:
        plan = Plan.from_json(plan_json)
        ctx = ParallelContext.from_plan(plan)
        spec = generate_params(plan)
        family = get_family(spec.family)
        plain_pipe = load_pipeline(spec, family.pipeline_class, cpu, transformers=False)
        sharded_pipe = load_pipeline(spec, family.pipeline_class, cpu, transformers=False)
        shard_text_encoders(sharded_pipe, ctx, cpu)
        with torch.no_grad():
            plain = [encode(plain_pipe, spec, family, p, cpu) for p in PROMPTS]
            sharded = [encode(sharded_pipe, spec, family, p, cpu) for p in PROMPTS]
        held = total = 0
        for enc in text_encoders(sharded_pipe):
            for p in enc.parameters():
                total += p.numel()
                held += p.to_local().numel() if isinstance(p, DTensor) else p.numel()
        err = max(float((_flat(a[k]) - _flat(b[k])).abs().max()) for a, b in zip(sharded, plain) for k in a
                  if torch.is_tensor(a[k]))
        out[name] = {"err": err, "null_err": 0.0, "scale": max(float(_flat(a["prompt_embeds"]).abs().max())
                                                              for a in plain),
                     "held": held, "total": total, "keys": sorted(plain[0])}
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
    assert ranks[0]["wan"]["keys"] == ["negative_prompt_embeds", "prompt_embeds"]  # the negative prompt's too
    assert ranks[0]["flux"]["keys"] == ["pooled_prompt_embeds", "prompt_embeds"]
    for name in ("wan", "flux", "umt5-3-layers"):
        for rank, r in enumerate(ranks):
            got = r[name]
            assert got["scale"] > 0.1, name  # a real encoding, not zeros
            assert got["err"] <= ENCODE_TOL and got["null_err"] <= ENCODE_TOL, (name, rank, got)
            # each rank keeps a quarter of every parameter (rows split 4 ways, rounded up)
            assert got["held"] <= got["total"] / 4 + got["total"] * 0.05, (name, rank, got)
        assert sum(r[name]["held"] for r in ranks) >= ranks[0][name]["total"]
