"""``pipeline.text_encoder: sharded`` on the generic path's generate, planner side (torch-free): it is
planned for every generic family's published pipeline (FSDP2 over each sequence group: every rank holds
1/n of the encoders plus the largest unit gathered at a time: the largest table, or the family's largest
layer, ``text_encoder_layer``, and the prefetched next one), and ``auto`` takes it where the leader's
encoders do not fit and the sharded ones do."""

from __future__ import annotations

import pytest

from sporch.orchestrator.config.cluster import find_cluster
from sporch.orchestrator.config.job import job_from_dict
from sporch.orchestrator.models.families import get_family
from sporch.orchestrator.models.families.base import T5_XXL_LAYER
from sporch.orchestrator.plan.family_checks import generate_placements
from sporch.orchestrator.plan.planner import make_plan

GIB = 1024**3
#: each generic preset at a usual size (frames, height, width) and guidance
USUAL = {"qwen-image": (1, 1328, 1328, 4.0), "sd3.5-large": (1, 1024, 1024, 3.5), "cogvideox-5b": (49, 480, 720, 6.0),
         "ltx-video-2b": (121, 512, 768, 3.0), "hunyuanvideo": (33, 480, 848, 6.0)}


def _plan(preset: str, cluster: str = "a100x32", **pipeline):
    frames, height, width, guidance = USUAL[preset]
    job = {"name": "text", "model": {"preset": preset},
           "workload": {"kind": "generate", "prompt": "a fox", "frames": frames, "height": height, "width": width,
                        "steps": 30, "guidance_scale": guidance, "dtype": "bfloat16"},
           "parallel": {"cfg": 1, "dp": 1, "shard_weights": "none"}, "pipeline": pipeline}
    return make_plan(find_cluster(cluster), job_from_dict(job, "<test>"))


@pytest.mark.parametrize("preset", sorted(USUAL))
def test_sharded_text_encoders_are_planned_with_a_share_and_the_largest_gathered_unit(preset):
    leader, sharded = _plan(preset, text_encoder="leader"), _plan(preset, text_encoder="sharded")
    fam = get_family(sharded.model.family)
    assert "sharded" in generate_placements(fam)["text_encoder"]
    parts = fam.pipeline_parts(sharded.model.preset)
    p, est = sharded.placement, sharded.estimates.pipeline
    seq = sharded.layout.sequence_degree
    assert (p.text_encoder, p.pipeline_degree, est.text_encoder.placement) == ("sharded", seq, "sharded") and seq == 32
    assert est.text_encoder.ranks == tuple(range(sharded.layout.world_size))
    params, layer = parts["text_encoder_parameters"], parts["text_encoder_layer"]
    want = (-(-params // seq) + max(parts["text_encoder_embedding"], 2 * layer)) * 2  # bfloat16
    assert est.busiest_rank.text_encoder == est.text_encoder.bytes_per_rank == want
    full = leader.estimates.pipeline.busiest_rank.text_encoder
    assert full == params * 2 and want < full / 4
    print(f"{preset}: text encoders {full / GIB:.2f} GiB on the leader, {want / GIB:.2f} GiB per rank sharded "
          f"over {seq}; busiest rank {leader.estimates.memory.memory_bytes_per_gpu / GIB:.1f} -> "
          f"{sharded.estimates.memory.memory_bytes_per_gpu / GIB:.1f} GiB")


def test_the_gathered_layer_is_the_largest_not_the_mean():
    """SD3.5: two CLIPs and T5-XXL (68 layers, 80 M on average): what is gathered with the next layer is
    a T5 layer (193 M), not the mean; the vocabulary table (132 M) is smaller than two of them."""
    plan = _plan("sd3.5-large", text_encoder="sharded")
    parts = get_family("sd3").pipeline_parts("sd3.5-large")
    mean = (parts["text_encoder_parameters"] - parts["text_encoder_embedding"]) / parts["text_encoder_layers"]
    assert parts["text_encoder_layer"] == T5_XXL_LAYER > 2 * mean
    assert plan.estimates.pipeline.text_encoder.bytes_per_rank == (
        -(-parts["text_encoder_parameters"] // 32) + 2 * T5_XXL_LAYER) * 2


def test_auto_shards_the_text_encoders_where_the_leaders_do_not_fit():
    """HunyuanVideo (13 B) at 33 x 480 x 848 on 40 GB A100s: the leader holds the transformer, the VAE and
    Llama + CLIP (14 GiB) while it encodes and does not fit; sharded over the 32 ranks it does (cheaper
    than the encoders on the CPU), and auto takes it."""
    leader = _plan("hunyuanvideo", "a100-40gx32", text_encoder="leader")
    assert not leader.estimates.memory.fits and leader.estimates.pipeline.busiest_rank.peak_stage == "encode"
    auto = _plan("hunyuanvideo", "a100-40gx32")
    assert (auto.placement.text_encoder, auto.placement.vae) == ("sharded", "leader")
    assert auto.estimates.memory.fits and "text encoder sharded over each sequence group (32)" in auto.placement.reason
    print(f"hunyuanvideo a100-40gx32: {leader.estimates.memory.memory_bytes_per_gpu / GIB:.1f} GiB with the leader "
          f"encoding; auto: {auto.placement.reason}")
