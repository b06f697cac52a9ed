"""``sporch inspect`` on a checkpoint: the memory per GPU under each placement option, the
planner's own estimates (torch-free; header-only checkpoints of the published shapes)."""

from __future__ import annotations

import json

from sporch.orchestrator.config.cluster import find_cluster
from sporch.orchestrator.config.job import job_from_dict
from sporch.orchestrator.plan.placement_report import placement_memory
from sporch.orchestrator.plan.planner import make_plan
from tests.plan.test_experts import A14B, INDEX, _header_only_safetensors, folder

#: Wan2.1 T2V 1.3B's transformer config as published
WAN13 = dict(A14B, num_attention_heads=12, num_layers=30, ffn_dim=8960)


def _one(tmp_path, cfg=WAN13):
    root = folder(tmp_path, dict(INDEX, transformer_2=[None, None], boundary_ratio=None), None, "one", cfg)
    _header_only_safetensors(root / "transformer" / "diffusion_pytorch_model.safetensors")
    return root


def test_each_option_is_the_planners_estimate(tmp_path):
    root = _one(tmp_path)
    report = placement_memory(str(root), find_cluster("h100x64"), [1, 2, 8, 16, 12], preset="wan2.1-t2v-1.3b")
    assert report["gpus"] == [1, 2, 8, 16] and report["skipped_gpus"] == [12]  # 12: not whole nodes of 8
    rows = {r["option"]: r["per_gpu"] for r in report["rows"]}
    assert list(rows) == ["plain", "shard_weights=world", "text_encoder=sharded", "text_encoder=cpu", "vae=parallel",
                          "vae=tiled", "all of these"]
    # one GPU: nothing to shard over, so sharding is the plain figure; every saving at once is the least
    assert rows["shard_weights=world"][1] == rows["plain"][1] == rows["text_encoder=sharded"][1]
    for n in report["gpus"]:
        assert rows["all of these"][n]["gib"] == min(r[n]["gib"] for r in rows.values())
    assert rows["text_encoder=sharded"][8]["gib"] < rows["plain"][8]["gib"]
    # the same figure `sporch plan` computes for that placement (8 GPUs = one node: ulysses 4 x ring 2)
    job = {"name": "x", "model": {"weights": str(root), "preset": "wan2.1-t2v-1.3b"},
           "workload": {"kind": "generate", "prompt": "p", "frames": 81, "height": 480, "width": 832,
                        "guidance_scale": 5.0, "dtype": "bfloat16"},
           "parallel": {"ulysses": 4, "ring": 2, "cfg": 1, "dp": 1, "shard_weights": "world"},
           "pipeline": {"text_encoder": "cpu", "vae": "tiled"}, "resources": {"nodes": 1}}
    plan = make_plan(find_cluster("h100x64"), job_from_dict(job))
    assert rows["all of these"][8]["gib"] == plan.estimates.memory.memory_gib_per_gpu


def test_two_experts_show_offload_and_unknown_encoders_only_the_weights(tmp_path, run_cli):
    two = folder(tmp_path, second=A14B, first=A14B)
    _header_only_safetensors(two / "transformer" / "diffusion_pytorch_model.safetensors")
    code, out, err = run_cli("inspect", two, "--json", "--gpus", "1,8", "--cluster", "a100-40gx32")
    assert code == 0, err
    p = json.loads(out)["placements"]
    rows = {r["option"]: r["per_gpu"] for r in p["rows"]}
    assert "experts=offload" in rows and rows["experts=offload"]["1"]["gib"] < rows["plain"]["1"]["gib"]
    assert not rows["plain"]["1"]["fits"]  # two resident 14B experts do not fit one 40 GiB GPU
    assert rows["shard_weights=world"]["8"]["gib"] < rows["plain"]["8"]["gib"]
    # a checkpoint of no preset: the text encoder's and VAE's sizes are unknown, their rows left out
    odd = _one(tmp_path / "odd", dict(WAN13, num_layers=7))
    code, out, err = run_cli("inspect", odd, "--json", "--gpus", "1,8")
    options = [r["option"] for r in json.loads(out)["placements"]["rows"]]
    assert options == ["plain", "shard_weights=world"], options
    code, out, err = run_cli("inspect", odd, "--gpus", "1,8", "--cluster", "local")
    assert code == 0 and "memory per GPU (GiB; * = does not fit)" in " ".join(out.split()), err
    assert "skipped GPU counts [8]" in out  # local has one node of 4
