"""One home per family (issues 34, 47): the planner records plan.model.family for every preset, for
a checkpoint folder and for a model given by its shape alone; every family fact is asked of the
family's module, and no code decides the family again by branching on its name."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from sporch.orchestrator.config.cluster import find_cluster
from sporch.orchestrator.config.job import job_from_dict
from sporch.orchestrator.config.job_spec import ModelSpec
from sporch.orchestrator.errors import SporchError
from sporch.orchestrator.models.families import FAMILIES, get_family, shape_family
from sporch.orchestrator.models.generate_inputs import generate_family
from sporch.orchestrator.plan.pipeline_estimate import known_parts
from sporch.orchestrator.plan.planner import make_plan
from sporch.orchestrator.plan.resolve import resolve_model

ROOT = Path(__file__).resolve().parents[2]
TINY = dict(frames=9, height=64, width=64, steps=2, guidance_scale=5.0, dtype="float32")
SHAPE = dict(depth=2, hidden=64, num_heads=4, patch=[1, 2, 2], in_channels=4, vae_stride=[4, 8, 8],
             text_len=8, text_dim=32)


def _plan(model: dict, **workload):
    job = job_from_dict({"name": "fam", "model": model, "workload": {**TINY, **workload},
                         "parallel": {"ulysses": 1, "ring": "auto", "cfg": 1}}, source=None)
    return make_plan(find_cluster("local"), job)


def test_no_code_branches_on_a_family_name():
    hits = [f"{p.relative_to(ROOT)}:{i}" for folder in ("orchestrator", "runtime") for p in (ROOT / folder).rglob("*.py")
            for i, line in enumerate(p.read_text().splitlines(), 1) if re.search(r"family\s*==", line)]
    assert hits == []


@pytest.mark.parametrize("preset", [p.name for f in FAMILIES for p in f.presets])
def test_the_planner_records_every_presets_family_and_class(preset):
    fam = next(f for f in FAMILIES if any(p.name == preset for p in f.presets))
    model = resolve_model(ModelSpec(preset=preset))
    assert (model.family, model.diffusers_class) == (fam.name, fam.classes[0])
    assert model.diffusers_config == dict(next(p.config for p in fam.presets if p.name == preset))


@pytest.mark.parametrize("attention, family", [("cross", "wan"), ("joint", "flux")])
def test_a_model_given_by_its_shape_runs_as_the_family_of_its_attention(attention, family):
    plan = _plan({"attention": attention, **SHAPE}, kind="generate", prompt="a fox", tiny_weights=True)
    assert plan.model.family == family and generate_family(plan.model).name == family
    assert plan.model.diffusers_class == get_family(family).classes[0]
    assert get_family(family).shape(plan.model.diffusers_config)["hidden"] == 64


def test_a_self_attention_shape_has_no_family_and_is_refused_in_one_line():
    with pytest.raises(SporchError) as err:
        _plan({"attention": "self", **SHAPE}, kind="benchmark")
    assert "no diffusers family runs a model of this attention kind" in str(err.value) and "\n" not in str(err.value)
    assert shape_family("self") is None


def test_every_family_fact_comes_from_its_module():
    assert shape_family("cross") is get_family("wan") and shape_family("joint") is get_family("flux")
    with_pipeline = {f.name for f in FAMILIES if f.pipeline_folders}
    assert with_pipeline == {f.name for f in FAMILIES if f.pipeline_class}  # every pipeline folder has its class
    assert {"wan", "flux", "qwen-image", "sd3", "cogvideox", "ltx-video", "hunyuanvideo", "pixart"} <= with_pipeline
    assert get_family("wan").video and not get_family("flux").video
    # the memory facts by preset: the TI2V-5B VAE, the I2V CLIP encoder, none for a test model
    assert known_parts(_plan({"preset": "wan2.2-ti2v-5b"}, kind="benchmark", height=64, width=64).model)[
        "vae_channels"] == 64
    assert "image_encoder" in known_parts(_plan({"preset": "wan2.1-i2v-14b-480p"}, kind="benchmark").model)
    assert known_parts(_plan({"preset": "tiny"}, kind="benchmark").model) is None


def test_the_runtime_has_one_module_per_family_with_a_pipeline():
    pytest.importorskip("torch")
    from sporch.runtime.models.families import family_module
    from sporch.runtime.pipelines.tiny import tiny_generic_families

    generic = {f.name for f in FAMILIES if f.pipeline_class}  # generate: one tiny pipeline each
    assert generic == set(tiny_generic_families())
    for name in generic:  # the generate's calls and tiny pipeline: in the family's own module
        module = family_module(name)
        assert all(callable(getattr(module, f, None)) for f in ("encode", "call_arguments", "tiny_pipeline")), name
