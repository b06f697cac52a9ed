"""``parallel.cfg=2`` for generate on the generic path, planner side (torch-free): planned for a
family whose diffusers pipeline applies CFG, however it does (``Family.pipeline_cfg``: one batched
``[uncond, cond]`` call for SD3, LTX-Video, CogVideoX; a "cond" then an "uncond" call for Qwen-Image's
true CFG), and considered by ``auto``; refused in one line (exit 2) for a guidance-distilled family
(HunyuanVideo: one pass per step, CFG off). The runtime side (frames against diffusers' pipelines on
cfg 2 x U2) is tests/runtime/pipelines/test_generate_generic.py."""

from __future__ import annotations

import dataclasses
import json

import pytest

from sporch.orchestrator.config.cluster import find_cluster
from sporch.orchestrator.config.job import job_from_dict
from sporch.orchestrator.errors import SporchError
from sporch.orchestrator.models.families import FAMILIES, PipelineCfg, get_family
from sporch.orchestrator.plan.layouts import feasible_layouts
from sporch.orchestrator.plan.planner import job_context
from tests.cli.test_bad_input_hardening import one_line_error
from tests.plan.test_families import LTX, QWEN, folder, plan
from tests.plan.test_generic_levers_plan import SD3

#: guidance on with a negative prompt: both CFG passes run
GENERATE = dict(kind="generate", prompt="a cat", negative_prompt="blurry", frames=1, height=96, width=160, steps=2,
                guidance_scale=4.0, dtype="float32")
#: HunyuanVideo is guidance-distilled: the scale is its embedded guidance input, no negative prompt
HUNYUAN = {"_class_name": "HunyuanVideoTransformer3DModel", "in_channels": 4, "out_channels": 4,
           "num_attention_heads": 2, "attention_head_dim": 16, "num_layers": 1, "num_single_layers": 1,
           "num_refiner_layers": 1, "patch_size": 2, "patch_size_t": 1, "text_embed_dim": 16,
           "pooled_projection_dim": 8, "rope_axes_dim": [4, 6, 6]}
DISTILLED = {**GENERATE, "negative_prompt": None, "frames": 9}
CFG2U2 = {"cfg": 2, "ulysses": 2, "ring": 1}
REFUSAL = "cfg 2: this model is guidance-distilled (one transformer pass per step"


#: how each family's pipeline applies CFG, checked against its __call__ (tests/runtime/pipelines/test_generate_generic.py)
KNOWN = {"qwen-image": PipelineCfg.TWO_CALLS, "ltx-video": PipelineCfg.BATCHED, "sd3": PipelineCfg.BATCHED,
         "cogvideox": PipelineCfg.BATCHED, "hunyuanvideo": PipelineCfg.NONE, "pixart": PipelineCfg.BATCHED,
         "wan": PipelineCfg.TWO_CALLS, "flux": PipelineCfg.NONE, "cogview4": PipelineCfg.TWO_CALLS,
         "lumina2": PipelineCfg.TWO_CALLS, "flux2": PipelineCfg.NONE, "skyreels-v2": PipelineCfg.TWO_CALLS,
         "z-image": PipelineCfg.BATCHED}


def test_every_generic_generate_family_records_how_its_pipeline_applies_cfg():
    """The record the planner and the runtime read: one batched call for SD3, LTX-Video, CogVideoX, PixArt-Sigma,
    Z-Image; two calls for Qwen-Image, CogView4, Lumina 2 (true CFG), Wan and SkyReels-V2 ("cond" then "uncond");
    none for HunyuanVideo, Flux.1 and FLUX.2 (guidance-distilled); and a record whose CFG and pipeline disagree is refused where it is written."""
    how = {f.name: f.pipeline_cfg for f in FAMILIES if f.pipeline_class}
    assert {k: v for k, v in how.items() if k in KNOWN} == KNOWN
    assert all(f.cfg == (f.pipeline_cfg is not PipelineCfg.NONE) for f in FAMILIES if f.pipeline_class)
    with pytest.raises(ValueError, match="family qwen-image: pipeline_cfg none with cfg True"):
        dataclasses.replace(get_family("qwen-image"), pipeline_cfg=PipelineCfg.NONE)
    with pytest.raises(ValueError, match="family hunyuanvideo: pipeline_cfg two_calls with cfg False"):
        dataclasses.replace(get_family("hunyuanvideo"), pipeline_cfg=PipelineCfg.TWO_CALLS)


@pytest.mark.parametrize("config, text_len", [(SD3, 7), (LTX, 7), (QWEN, 5)])
def test_cfg2_generate_is_planned_where_the_pipeline_applies_cfg(tmp_path, config, text_len):
    p = plan({"weights": str(folder(tmp_path, config)), "text_len": text_len}, GENERATE, parallel=CFG2U2)
    assert (p.workload.kind, p.workload.cfg_enabled) == ("generate", True)
    assert (p.layout.cfg, p.layout.ulysses, p.layout.ring, p.world_size) == (2, 2, 1, 4)


def test_cfg2_generate_is_refused_in_one_line_for_a_guidance_distilled_family(tmp_path):
    with pytest.raises(SporchError) as exc:
        plan({"weights": str(folder(tmp_path, HUNYUAN))}, DISTILLED, parallel=CFG2U2)
    msg = str(exc.value)
    assert REFUSAL in msg and "set parallel.cfg=1" in msg and "\n" not in msg
    assert plan({"weights": str(folder(tmp_path / "cfg1", HUNYUAN))}, DISTILLED,
                parallel={**CFG2U2, "cfg": 1, "ring": 2}).layout.cfg == 1


def test_cfg2_generate_refusal_through_the_cli_exits_2(run_cli, tmp_path):
    root = folder(tmp_path, HUNYUAN)
    job = tmp_path / "job.yaml"
    job.write_text("name: x\nworkload: " + json.dumps(DISTILLED) + "\n")
    code, out, err = run_cli("plan", "--cluster", "local", job, f"model.weights={root}", "parallel.cfg=2",
                             "parallel.ulysses=2", "parallel.ring=1")
    one_line_error(code, out, err, REFUSAL, "set parallel.cfg=1")


def test_auto_considers_cfg2_for_a_two_call_pipeline(tmp_path):
    """The same decision fills ``auto``: Qwen-Image's generate (two calls) and SD3's (batched) have
    cfg-2 layouts among the feasible ones; HunyuanVideo's (CFG off) has none."""
    def cfgs(config, workload, **model):
        job = job_from_dict({"name": "fam", "model": {"weights": str(folder(tmp_path / workload["kind"] /
                                                                            config["_class_name"], config)),
                                                      **model}, "workload": workload})
        return {lay.cfg for lay in feasible_layouts(job_context(find_cluster("local"), job))}

    assert cfgs(QWEN, GENERATE, text_len=5) == {1, 2}
    assert cfgs(SD3, GENERATE, text_len=5) == {1, 2}
    assert cfgs(HUNYUAN, DISTILLED) == {1}


def test_world_sharding_is_refused_where_the_two_calls_are_split(tmp_path):
    """With Qwen-Image's two CFG calls split over cfg 2 the cfg ranks' forwards (and their FSDP2
    gathers) do not run together: ``shard_weights: world`` is refused in one line, ``sequence``
    (each cfg rank's own sequence group) is planned; SD3's batched call keeps ``world``."""
    qwen = {"weights": str(folder(tmp_path, QWEN)), "text_len": 5}
    with pytest.raises(SporchError, match="parallel.shard_weights=world needs every rank to run the same forwards, "
                                          "but with parallel.cfg=2 this pipeline's two CFG calls per step run one on "
                                          "each cfg rank.*use parallel.shard_weights=sequence") as exc:
        plan(qwen, GENERATE, parallel={**CFG2U2, "shard_weights": "world"})
    assert "\n" not in str(exc.value)
    p = plan(qwen, GENERATE, parallel={**CFG2U2, "shard_weights": "sequence"})
    assert (p.placement.shard_weights, p.placement.shard_degree, p.layout.cfg) == ("sequence", 2, 2)
    sd3 = plan({"weights": str(folder(tmp_path, SD3)), "text_len": 7}, GENERATE,
               parallel={**CFG2U2, "shard_weights": "world"})
    assert (sd3.placement.shard_weights, sd3.placement.shard_degree) == ("world", 4)


def test_auto_never_shards_over_the_world_where_the_two_calls_are_split(tmp_path):
    """``auto`` where only a world-wide shard fits (degree 4 on cfg 2 x U2): taken for a batched
    pipeline, not where the two calls are split (the sequence group's shard, the least memory)."""
    from sporch.orchestrator.contract.plan import Layout
    from sporch.orchestrator.plan.placement import choose_placement

    base = plan({"weights": str(folder(tmp_path, QWEN)), "text_len": 5}, GENERATE, parallel=CFG2U2).estimates

    def estimate(degree, text, vae, experts):
        gib = 100.0 / degree
        return dataclasses.replace(base, memory=dataclasses.replace(
            base.memory, fits=degree >= 4, memory_bytes_per_gpu=int(gib * 1024**3), memory_gib_per_gpu=gib))

    modes = {"shard_weights": "auto", "text_encoder": "leader", "vae": "leader", "experts": "resident"}
    layout = Layout(dp=1, cfg=2, ring=1, ulysses=2)
    batched, _ = choose_placement(modes, layout, estimate, lockstep=False, generate=True)
    split, _ = choose_placement(modes, layout, estimate, lockstep=False, cfg_lockstep=False, generate=True)
    assert (batched.shard_weights, batched.shard_degree) == ("world", 4)
    assert (split.shard_weights, split.shard_degree) == ("sequence", 2)


#: a PixArt transformer config (runtime/models/families/pixart.py's TINY), PixArt-Alpha 1024's conditions on
PIXART_ALPHA = {"_class_name": "PixArtTransformer2DModel", "num_attention_heads": 4, "attention_head_dim": 8,
                "in_channels": 4, "out_channels": 8, "num_layers": 2, "cross_attention_dim": 32,
                "caption_channels": 16, "sample_size": 128, "patch_size": 2, "norm_type": "ada_norm_single",
                "num_embeds_ada_norm": 1000}


def test_a_model_its_familys_pipeline_cannot_run_is_refused_for_generate(tmp_path):
    """PixArt-Alpha 1024 (sample_size 128, use_additional_conditions unset: on) embeds resolution and
    aspect ratio, which PixArtSigmaPipeline does not pass: generate is refused at plan time in one
    line (``Family.generate_refusal``); verify plans; with the conditions off, generate plans."""
    alpha = folder(tmp_path / "alpha", PIXART_ALPHA)
    with pytest.raises(SporchError, match="use_additional_conditions.*PixArtSigmaPipeline does not pass") as e:
        plan({"weights": str(alpha)}, GENERATE)
    assert "\n" not in str(e.value)
    assert plan({"weights": str(alpha)}, {**GENERATE, "kind": "verify", "prompt": None,
                                          "negative_prompt": None}).model.family == "pixart"
    sigma = folder(tmp_path / "sigma", {**PIXART_ALPHA, "use_additional_conditions": False})
    assert plan({"weights": str(sigma)}, GENERATE).workload.kind == "generate"
