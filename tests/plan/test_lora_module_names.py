"""The modules a LoRA may target (``models/lora_module_names.module_names``) follow the Plan's model record and
its diffusers config, the same facts the memory estimate reads: Wan2.1 I2V's image embedding and
image cross-attention, Flux.1-dev's guidance embedding; none of them where the model lacks them."""

from __future__ import annotations

import pytest

from sporch.orchestrator.config.cluster import find_cluster
from sporch.orchestrator.config.job import job_from_dict
from sporch.orchestrator.models.lora_module_names import module_names
from sporch.orchestrator.plan.planner import make_plan

SIZES = {"wan": dict(frames=81, height=480, width=832), "flux": dict(height=1024, width=1024)}


def _modules(preset: str, size: str) -> set[str]:
    job = job_from_dict({"model": {"preset": preset}, "workload": {"kind": "benchmark", **SIZES[size]}})
    return module_names(make_plan(find_cluster("a100x32"), job).model.to_dict())


@pytest.mark.parametrize("preset, size, present, absent", [
    ("wan2.1-i2v-14b-480p", "wan", {"img_emb.fc1", "blocks.39.cross_attn.k_img"}, set()),
    ("wan2.1-t2v-14b", "wan", set(), {"img_emb.fc1", "blocks.0.cross_attn.k_img"}),
    ("flux.1-dev", "flux", {"guidance_in.fc1"}, set()),
    ("flux.1-schnell", "flux", set(), {"guidance_in.fc1"}),
])
def test_lora_targets_follow_the_plan(preset, size, present, absent):
    names = _modules(preset, size)
    assert present <= names and not (absent & names)
