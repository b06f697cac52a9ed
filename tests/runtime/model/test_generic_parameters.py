"""Every generic-path preset's parameter count (listed from the family registry): the diffusers
class built on the meta device from the preset's config (no memory, well under a second each)
== the count the planner uses (plan/estimates.py ``parameter_parts``: blocks, largest block, root)."""

from __future__ import annotations

import dataclasses

import pytest

torch = pytest.importorskip("torch")
diffusers = pytest.importorskip("diffusers")

from sporch.orchestrator.config.job import ModelSpec  # noqa: E402
from sporch.orchestrator.models.families import FAMILIES, counted_parameters  # noqa: E402
from sporch.orchestrator.plan.estimates import parameter_count, parameter_parts  # noqa: E402
from sporch.orchestrator.plan.resolve import resolve_model  # noqa: E402

PRESETS = [(fam, p) for fam in FAMILIES for p in fam.presets]


def meta_parts(class_name: str, config: dict) -> dict[str, int]:
    """blocks (the children of the class's top-level ModuleLists), the largest, the rest."""
    with torch.device("meta"):
        model = getattr(diffusers, class_name).from_config(dict(config))
    blocks = [sum(p.numel() for p in b.parameters()) for _, child in model.named_children()
              if isinstance(child, torch.nn.ModuleList) for b in child]
    total = sum(p.numel() for p in model.parameters())
    return {"blocks": sum(blocks), "largest_block": max(blocks), "root": total - sum(blocks)}


def test_every_generic_preset_is_listed():
    names = {p.name for _, p in PRESETS}
    assert {"qwen-image", "ltx-video-2b", "ltx-video-13b", "sd3.5-large", "sd3.5-medium", "cogvideox-5b",
            "hunyuanvideo"} <= names
    assert all(p.parameters is not None for _, p in PRESETS), "a generic preset without its counted parameters"


@pytest.mark.parametrize("fam, preset", PRESETS, ids=[p.name for _, p in PRESETS])
def test_planner_parameters_equal_the_diffusers_class_on_meta(fam, preset):
    ref = meta_parts(fam.classes[0], preset.config)
    model = resolve_model(ModelSpec(preset=preset.name))
    assert parameter_parts(model) == ref
    assert parameter_count(model) == ref["blocks"] + ref["root"]


def test_a_preset_with_its_shape_changed_falls_back_to_the_formula():
    model = resolve_model(ModelSpec(preset="cogvideox-5b"))
    assert counted_parameters(model) is not None
    deeper = dataclasses.replace(model, depth=model.depth + 1)
    assert counted_parameters(deeper) is None


def test_a_published_checkpoint_folder_counts_as_its_preset(tmp_path):
    """A folder (no preset) whose config.json is a published one counts that preset's parameters;
    one of another shape keeps the formula."""
    import json

    fam = next(f for f in FAMILIES if f.name == "cogvideox")
    preset = fam.presets[0]
    for name, config in (("published", preset.config), ("deeper", {**preset.config, "num_layers": 43})):
        where = tmp_path / name / "transformer"
        where.mkdir(parents=True)
        (where / "config.json").write_text(json.dumps({"_class_name": fam.classes[0], **config}))
        model = resolve_model(ModelSpec(weights=str(tmp_path / name)))
        assert model.preset is None and model.diffusers_class == fam.classes[0]
        expected = preset.parameters if name == "published" else None
        assert counted_parameters(model) == expected
