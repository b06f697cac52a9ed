"""Each rule written once and read by both halves: the layout's name, the CFG decision, the compile
rule, the step cache's defaults, and the Plan's sequence and heads sections (issue 33, item 1)."""

from __future__ import annotations

import dataclasses

import pytest
from tests.testutil import EXAMPLES

from sporch.orchestrator.campaign.report_plot_data import _family, _plottable
from sporch.orchestrator.config.cluster import find_cluster
from sporch.orchestrator.config.job import load_job
from sporch.orchestrator.config.job_spec import CacheSpec
from sporch.orchestrator.contract.plan import Layout
from sporch.orchestrator.contract.sections import CacheSection, compile_off_reason
from sporch.orchestrator.plan.cost_inputs import compiles
from sporch.orchestrator.plan.layouts import compact
from sporch.orchestrator.plan.planner import make_plan
from sporch.runtime.pipelines.params import generate_params
from sporch.runtime.testing import plan_for, preset_model


def test_the_layout_name_is_written_and_read_in_one_place():
    for lay in (Layout(), Layout(dp=2, cfg=2, ring=1, ulysses=4), Layout(ring=8, ulysses=16)):
        assert Layout.from_name(lay.name) == lay and compact(lay) == lay.name
    assert Layout(dp=2, cfg=1, ring=3, ulysses=4).name == "2x1x3x4"
    for bad in ("1x2x3", "1x0x1x1", "ax1x1x1", "1x1x1x1x1", ""):
        with pytest.raises(ValueError, match="layout"):
            Layout.from_name(bad)
    assert _family("2x2x1x4") == "dp2 cfg2 ulysses4" and _family("1x1x8x1") == "ulysses1"
    assert _plottable({"gpus": 8, "layout": "1x1x2x4"})
    assert not _plottable({"gpus": 8, "layout": "1x1x2"}) and not _plottable({"gpus": 8, "layout": "0x1x2x4"})


@pytest.mark.parametrize("example, cluster, overrides", [
    ("wan14b-720p.yaml", "a100x32", []),
    ("wan1.3b-480p.yaml", "a100x8", ["parallel.ulysses=8", "parallel.ring=1", "parallel.cfg=1"]),  # 12 heads over 8: uneven
    ("flux-2048.yaml", "h200x16", []),
])
def test_plan_for_builds_the_sections_the_planner_builds(example, cluster, overrides):
    plan = make_plan(find_cluster(cluster), load_job(EXAMPLES / example, overrides))
    wl = plan.workload
    mine = plan_for(plan.layout, plan.model.to_dict(), tuple(plan.sequence.grid),
                    workload={"guidance_scale": wl.guidance_scale, "steps": wl.steps})
    assert mine.sequence == plan.sequence and mine.heads == plan.heads
    assert mine.workload.cfg_enabled == wl.cfg_enabled


def test_the_runtime_reads_the_cfg_decision_from_the_plan():
    plan = plan_for(Layout(), preset_model("tiny"), (1, 2, 2),
                    workload={"kind": "generate", "guidance_scale": 5.0, "prompt": "a fox"})
    assert plan.workload.cfg_enabled and generate_params(plan).cfg
    off = dataclasses.replace(plan, workload=dataclasses.replace(plan.workload, cfg_enabled=False))
    assert not generate_params(off).cfg  # the record wins over the scale: nothing decides again


def test_the_compile_rule_is_one_for_the_cost_model_and_the_runtime():
    plan = make_plan(find_cluster("a100x8"), load_job(EXAMPLES / "wan1.3b-480p.yaml"))
    for option in (None, True, False):
        for shard in ("none", "sequence", "world"):
            p = dataclasses.replace(plan, workload=dataclasses.replace(plan.workload, compile=option),
                                    placement=dataclasses.replace(plan.placement, shard_weights=shard))
            assert compiles(p) == (compile_off_reason(option, shard, on_gpu=True) is None)
            assert compiles(p) == (option is not False and shard == "none")
    assert compile_off_reason(None, "none", on_gpu=False) == "off (workload.compile)"
    assert compile_off_reason(True, "none", on_gpu=False) is None
    assert "sharded" in compile_off_reason(True, "sequence", on_gpu=True)


def test_the_step_cache_defaults_are_written_once():
    pytest.importorskip("torch")
    from sporch.runtime.models.cache.decision import StepPolicy

    spec, section = CacheSpec(), CacheSection()
    assert (spec.warmup_steps, spec.max_consecutive) == (section.warmup_steps, section.max_consecutive) == (1, 0)
    policy = StepPolicy(num_steps=8, threshold=0.1)
    assert (policy.warmup_steps, policy.max_consecutive) == (section.warmup_steps, section.max_consecutive)