"""One home per family (issue 34): the planner records plan.model.family for the hand-built presets
and for a stand-in in a generate job, every family fact is asked of the family's module, and no
code decides the family again by branching on its name."""

from __future__ import annotations

import dataclasses
import re
from pathlib import Path

import pytest

from sporch.orchestrator.config.cluster import find_cluster
from sporch.orchestrator.config.job import job_from_dict
from sporch.orchestrator.models.families import FAMILIES, get_family, standin_family
from sporch.orchestrator.models.generate_inputs import check_generate, generate_family
from sporch.orchestrator.plan.pipeline_estimate import known_parts
from sporch.orchestrator.plan.planner import make_plan

ROOT = Path(__file__).resolve().parents[2]
TINY = dict(frames=9, height=64, width=64, steps=2, guidance_scale=5.0, dtype="float32")


def _plan(model: dict, **workload):
    job = job_from_dict({"name": "fam", "model": model, "workload": {**TINY, **workload},
                         "parallel": {"ulysses": 1, "ring": "auto", "cfg": 1}}, source=None)
    return make_plan(find_cluster("local"), job)


def test_no_code_branches_on_a_family_name():
    hits = [f"{p.relative_to(ROOT)}:{i}" for folder in ("orchestrator", "runtime") for p in (ROOT / folder).rglob("*.py")
            for i, line in enumerate(p.read_text().splitlines(), 1) if re.search(r"family\s*==", line)]
    assert hits == []


@pytest.mark.parametrize("preset, family", [("wan2.1-t2v-1.3b", "wan"), ("flux.1-dev", "flux")])
def test_the_planner_records_the_hand_built_family(preset, family):
    assert _plan({"preset": preset}, kind="benchmark").model.family == family


@pytest.mark.parametrize("attention, family", [("cross", "wan"), ("joint", "flux")])
def test_a_stand_in_in_a_generate_job_records_the_pipeline_family(attention, family):
    plan = _plan({"preset": "tiny", "attention": attention, "weights": "/nonexistent/tiny"}, kind="generate",
                 prompt="a fox", tiny_weights=True)
    assert plan.model.family == family and generate_family(plan.model).name == family
    assert _plan({"preset": "tiny", "attention": attention}, kind="benchmark").model.family is None


def test_generate_refuses_a_model_without_a_pipeline_in_one_line():
    """Every family has a generate pipeline now; a stand-in of self-attention (no family) is not
    taken for another family's: generate is refused, naming the model and the families that run."""
    plan = _plan({"preset": "tiny", "attention": "self"}, kind="benchmark")
    assert plan.model.family is None
    model = dataclasses.replace(plan.model, weights="/nonexistent/tiny")
    problems = check_generate(model, plan.workload)
    assert [p for p in problems if "got preset 'tiny' attention 'self'" in p and "HunyuanVideo" in p and "\n" not in p]
    # every family that generates is named, from the registry (a new family needs no edit of the message)
    (line,) = [p for p in problems if "got preset 'tiny' attention 'self'" in p]
    assert all(f.title in line for f in FAMILIES if f.pipeline_folders), line


def test_every_family_fact_comes_from_its_module():
    assert standin_family("cross") is get_family("wan") and standin_family("self") is None
    with_pipeline = {f.name for f in FAMILIES if f.pipeline_folders}
    assert with_pipeline == {"wan", "flux", "qwen-image", "sd3", "cogvideox", "ltx-video", "hunyuanvideo", "pixart"}
    # the generic generate's: the diffusers pipeline it runs
    assert {f.name for f in FAMILIES if f.pipeline_class} == {"qwen-image", "sd3", "cogvideox", "ltx-video",
                                                              "hunyuanvideo", "pixart"}
    assert get_family("wan").video and not get_family("flux").video
    # the memory facts by preset: the TI2V-5B VAE, the I2V CLIP encoder, none for a checkpoint without a preset
    assert known_parts(_plan({"preset": "wan2.2-ti2v-5b"}, kind="benchmark").model)["vae_channels"] == 64
    assert "image_encoder" in known_parts(_plan({"preset": "wan2.1-i2v-14b-480p"}, kind="benchmark").model)
    assert known_parts(_plan({"preset": "tiny"}, kind="benchmark").model) is None


def test_the_runtime_has_one_pipeline_record_per_pipeline_family():
    pytest.importorskip("torch")
    from sporch.runtime.pipelines.families import pipeline_family
    from sporch.runtime.pipelines.tiny import TINY_PIPELINES

    from sporch.runtime.model.generic.families import family_module
    from sporch.runtime.pipelines.tiny_generic import tiny_generic_families

    names = {f.name for f in FAMILIES if f.pipeline_folders and not f.pipeline_class}  # hand-built pipelines
    assert {pipeline_family(n).name for n in names} == names == set(TINY_PIPELINES)
    generic = {f.name for f in FAMILIES if f.pipeline_class}  # the generic generate: one tiny pipeline each
    assert generic == set(tiny_generic_families())
    for name in generic:  # the generic generate's calls and tiny pipeline: in the family's own module
        module = family_module(name)
        assert all(callable(getattr(module, f, None)) for f in ("encode", "call_arguments", "tiny_pipeline")), name
    with pytest.raises(KeyError, match="no generate pipeline for family 'sd3'"):
        pipeline_family("sd3")
