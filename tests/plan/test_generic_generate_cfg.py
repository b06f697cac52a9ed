"""``parallel.cfg=2`` for generate on the generic path, planner side (torch-free): planned for a
family whose diffusers pipeline batches both CFG passes into one transformer call (SD3,
LTX-Video, CogVideoX: ``Family.pipeline_cfg_batched``), refused in one line (exit 2) for one that
calls the transformer once per pass (Qwen-Image's true CFG), and never chosen for it by ``auto``.
The runtime side (frames against diffusers' pipelines on cfg 2 x U2) is
tests/runtime/pipelines/test_generate_generic.py."""

from __future__ import annotations

import json

import pytest

from sporch.orchestrator.config.cluster import find_cluster
from sporch.orchestrator.config.job import job_from_dict
from sporch.orchestrator.errors import SporchError
from sporch.orchestrator.models.families import FAMILIES
from sporch.orchestrator.plan.layouts import feasible_layouts
from sporch.orchestrator.plan.planner import job_context
from tests.cli.test_bad_input_hardening import one_line_error
from tests.plan.test_families import LTX, QWEN, folder, plan
from tests.plan.test_generic_levers_plan import SD3

#: guidance on with a negative prompt: both CFG passes run
GENERATE = dict(kind="generate", prompt="a cat", negative_prompt="blurry", frames=1, height=96, width=160, steps=2,
                guidance_scale=4.0, dtype="float32")
CFG2U2 = {"cfg": 2, "ulysses": 2, "ring": 1}
REFUSAL = ("cfg 2: generate on QwenImageTransformer2DModel (family qwen-image, the generic path) runs "
           "QwenImagePipeline, which calls the transformer twice per step for CFG")


def test_every_generic_generate_family_records_how_its_pipeline_runs_cfg():
    """The record the planner reads: batched for SD3, LTX-Video, CogVideoX, PixArt-Sigma; per pass
    for Qwen-Image and HunyuanVideo (true CFG)."""
    batched = {f.name: f.pipeline_cfg_batched for f in FAMILIES if f.pipeline_class}
    assert batched == {"qwen-image": False, "ltx-video": True, "sd3": True, "cogvideox": True,
                       "hunyuanvideo": False, "pixart": True}


@pytest.mark.parametrize("config, text_len", [(SD3, 7), (LTX, 7)])
def test_cfg2_generate_is_planned_where_the_pipeline_batches_cfg(tmp_path, config, text_len):
    p = plan({"weights": str(folder(tmp_path, config)), "text_len": text_len}, GENERATE, parallel=CFG2U2)
    assert (p.workload.kind, p.workload.cfg_enabled) == ("generate", True)
    assert (p.layout.cfg, p.layout.ulysses, p.layout.ring, p.world_size) == (2, 2, 1, 4)


def test_cfg2_generate_is_refused_in_one_line_where_the_pipeline_calls_the_transformer_per_pass(tmp_path):
    with pytest.raises(SporchError) as exc:
        plan({"weights": str(folder(tmp_path, QWEN)), "text_len": 5}, GENERATE, parallel=CFG2U2)
    msg = str(exc.value)
    assert REFUSAL in msg and "set parallel.cfg=1" in msg and "\n" not in msg


def test_cfg2_generate_refusal_through_the_cli_exits_2(run_cli, tmp_path):
    root = folder(tmp_path, QWEN)
    job = tmp_path / "job.yaml"
    job.write_text("name: x\nmodel: {text_len: 5}\nworkload: " + json.dumps(GENERATE) + "\n")
    code, out, err = run_cli("plan", "--cluster", "local", job, f"model.weights={root}", "parallel.cfg=2",
                             "parallel.ulysses=2", "parallel.ring=1")
    one_line_error(code, out, err, REFUSAL, "set parallel.cfg=1")


def test_auto_never_offers_cfg2_for_a_per_pass_pipeline(tmp_path):
    """The same decision fills ``auto``: Qwen-Image's generate has no cfg-2 layout among the
    feasible ones, while its verify with CFG on and SD3's generate do."""
    def cfgs(config, workload):
        job = job_from_dict({"name": "fam", "model": {"weights": str(folder(tmp_path / workload["kind"] /
                                                                            config["_class_name"], config)),
                                                      "text_len": 5}, "workload": workload})
        return {lay.cfg for lay in feasible_layouts(job_context(find_cluster("local"), job))}

    assert cfgs(QWEN, GENERATE) == {1}
    assert cfgs(QWEN, {**GENERATE, "kind": "verify", "prompt": None, "negative_prompt": None}) == {1, 2}
    assert cfgs(SD3, GENERATE) == {1, 2}
