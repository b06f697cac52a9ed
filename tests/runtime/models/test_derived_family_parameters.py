"""The parameter formulas of the families whose split plan is derived (cogview4, lumina2, chroma:
``Family.count_parameters``, pure Python) == the diffusers class built on the meta device, for each
preset and for shapes no preset has (``OTHER_SHAPES``: what tests/runtime/models/test_generic_parameters.py's
table of the same name needs for these families)."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
diffusers = pytest.importorskip("diffusers")

from sporch.orchestrator.models.families import get_family  # noqa: E402
from sporch.orchestrator.models.families.base import ParameterCount  # noqa: E402

OTHER_SHAPES = {
    "cogview4": [  # tiny, and a mid-sized one with another time and condition width
        {"patch_size": 2, "in_channels": 4, "out_channels": 5, "num_layers": 2, "attention_head_dim": 8,
         "num_attention_heads": 3, "text_embed_dim": 16, "time_embed_dim": 12, "condition_dim": 6,
         "rope_axes_dim": [8, 8]},
        {"num_layers": 6, "attention_head_dim": 64, "num_attention_heads": 12, "text_embed_dim": 1024,
         "time_embed_dim": 256, "condition_dim": 128, "in_channels": 16, "out_channels": 16}],
    "lumina2": [  # grouped-query heads, an output width of its own; an FFN multiplier
        {"sample_size": 16, "patch_size": 2, "in_channels": 4, "out_channels": 5, "hidden_size": 24, "num_layers": 2,
         "num_refiner_layers": 1, "num_attention_heads": 3, "num_kv_heads": 1, "multiple_of": 16,
         "axes_dim_rope": [2, 2, 4], "axes_lens": [32, 32, 32], "cap_feat_dim": 16},
        {"hidden_size": 1536, "num_layers": 4, "num_refiner_layers": 1, "num_attention_heads": 12, "num_kv_heads": 4,
         "multiple_of": 128, "ffn_dim_multiplier": 1.3, "axes_dim_rope": [32, 48, 48], "cap_feat_dim": 2048}],
    "chroma": [
        {"patch_size": 1, "in_channels": 16, "out_channels": 5, "num_layers": 1, "num_single_layers": 2,
         "attention_head_dim": 8, "num_attention_heads": 3, "joint_attention_dim": 16, "axes_dims_rope": [2, 2, 4],
         "approximator_num_channels": 8, "approximator_hidden_dim": 20, "approximator_layers": 2},
        {"num_layers": 3, "num_single_layers": 5, "attention_head_dim": 64, "num_attention_heads": 8,
         "axes_dims_rope": [16, 24, 24], "approximator_hidden_dim": 256, "approximator_layers": 2}],
}
CASES = [(f, f"{f}-{p.name}", p.config) for f in OTHER_SHAPES for p in get_family(f).presets] + \
        [(f, f"{f}-{i}", c) for f in OTHER_SHAPES for i, c in enumerate(OTHER_SHAPES[f])]


def meta_parts(class_name: str, config: dict) -> ParameterCount:
    with torch.device("meta"):
        model = getattr(diffusers, class_name).from_config(dict(config))
    blocks = [sum(p.numel() for p in b.parameters()) for _, child in model.named_children()
              if isinstance(child, torch.nn.ModuleList) for b in child]
    total = sum(p.numel() for p in model.parameters())
    return ParameterCount(blocks=sum(blocks), largest_block=max(blocks), root=total - sum(blocks))


@pytest.mark.parametrize("fam, label, config", CASES, ids=[c[1] for c in CASES])
def test_the_family_formula_equals_the_class_on_meta(fam, label, config):
    family = get_family(fam)
    counted = meta_parts(family.classes[0], config)
    assert family.count_parameters(config) == counted
    for preset in family.presets:
        if preset.config is config:
            assert preset.parameters == counted
