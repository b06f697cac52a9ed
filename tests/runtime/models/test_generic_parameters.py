"""Every generic-path preset's parameter count (listed from the family registry): the diffusers
class built on the meta device from the preset's config (no memory, well under a second each)
== the count the planner uses (plan/estimates.py ``parameter_parts``: blocks, largest block, root)."""

from __future__ import annotations

import dataclasses

import pytest

torch = pytest.importorskip("torch")
diffusers = pytest.importorskip("diffusers")

from sporch.orchestrator.config.job_spec import ModelSpec  # noqa: E402
from sporch.orchestrator.models.families import FAMILIES, counted_parameters  # noqa: E402
from sporch.orchestrator.plan.estimates import parameter_count, parameter_parts  # noqa: E402
from sporch.orchestrator.plan.resolve import resolve_model  # noqa: E402

PRESETS = [(fam, p) for fam in FAMILIES for p in fam.presets]


def meta_parts(class_name: str, config: dict) -> dict[str, int]:
    """blocks (the children of the class's top-level ModuleLists), the largest, the rest. The
    parameters on meta, nothing else (``torch.device("meta")`` would also put there the tensors of
    any module the class imports on first use: diffusers' MagCache ratios)."""
    from accelerate import init_empty_weights

    with init_empty_weights(include_buffers=False):
        model = getattr(diffusers, class_name).from_config(dict(config))
    blocks = [sum(p.numel() for p in b.parameters()) for _, child in model.named_children()
              if isinstance(child, torch.nn.ModuleList) for b in child]
    total = sum(p.numel() for p in model.parameters())
    return {"blocks": sum(blocks), "largest_block": max(blocks), "root": total - sum(blocks)}


def test_every_generic_preset_is_listed():
    names = {p.name for _, p in PRESETS}
    assert {"qwen-image", "ltx-video-2b", "ltx-video-13b", "sd3.5-large", "sd3.5-medium", "cogvideox-5b",
            "hunyuanvideo", "pixart-sigma-xl-2-512-ms", "pixart-sigma-xl-2-1024-ms", "pixart-sigma-xl-2-2k-ms"} <= names
    assert all(p.parameters is not None for _, p in PRESETS if not p.test_model), "a preset without its counted parameters"


@pytest.mark.parametrize("fam, preset", PRESETS, ids=[p.name for _, p in PRESETS])
def test_planner_parameters_equal_the_diffusers_class_on_meta(fam, preset):
    ref = meta_parts(fam.classes[0], preset.config)
    model = resolve_model(ModelSpec(preset=preset.name))
    assert parameter_parts(model) == ref
    assert parameter_count(model) == ref["blocks"] + ref["root"]
    if preset.parameters is not None:  # a published preset's counted parameters (test models: the formula alone)
        assert fam.count_parameters(preset.config) == preset.parameters  # the family's formula agrees
    assert fam.count_parameters(preset.config).as_parts() == ref


def test_a_preset_with_its_shape_changed_falls_back_to_the_formula():
    model = resolve_model(ModelSpec(preset="cogvideox-5b"))
    assert counted_parameters(model) is not None
    deeper = dataclasses.replace(model, depth=model.depth + 1)
    assert counted_parameters(deeper) is None


def test_a_published_pixart_sigma_folder_naming_transformer2dmodel_plans_as_its_preset(tmp_path):
    """The published PixArt-Sigma transformer/config.json names diffusers' older ``Transformer2DModel``
    (``norm_type: ada_norm_single``), which diffusers' loader builds as ``PixArtTransformer2DModel``:
    sporch plans the folder as that class (family pixart, the preset's parameters) and its loader
    builds it, where it was refused as an unsupported class."""
    import json

    from sporch.orchestrator.models.families import config_class, get_family
    from sporch.runtime.models.build import load_diffusers, random_diffusers
    from sporch.runtime.models.families import family_module

    fam = get_family("pixart")
    preset = fam.presets[0]
    where = tmp_path / "published" / "transformer"
    where.mkdir(parents=True)
    (where / "config.json").write_text(json.dumps({"_class_name": "Transformer2DModel", **preset.config}))
    model = resolve_model(ModelSpec(weights=str(tmp_path / "published")))
    assert (model.family, model.diffusers_class) == ("pixart", "PixArtTransformer2DModel")
    assert counted_parameters(model) == preset.parameters
    assert config_class({"_class_name": "Transformer2DModel", "norm_type": "ada_norm_zero"}) == "Transformer2DModel"
    tiny = tmp_path / "tiny" / "transformer"
    random_diffusers("PixArtTransformer2DModel", family_module("pixart").TINY, seed=1).save_pretrained(str(tiny))
    config = json.loads((tiny / "config.json").read_text())
    (tiny / "config.json").write_text(json.dumps({**config, "_class_name": "Transformer2DModel"}))
    assert type(load_diffusers(str(tmp_path / "tiny"))).__name__ == "PixArtTransformer2DModel"


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
        assert parameter_parts(model) == meta_parts(fam.classes[0], config)  # the deeper one: the family's formula


#: Shapes no preset has, per family (tiny and mid-sized, options the presets leave at their defaults
#: switched on): the family's formula of the config (``Family.count_parameters``) == the class on meta.
OTHER_SHAPES = {
    "wan": [
        {"num_layers": 3, "num_attention_heads": 6, "attention_head_dim": 12, "in_channels": 4, "out_channels": 4,
         "text_dim": 20, "freq_dim": 32, "ffn_dim": 40},
        {"num_layers": 2, "num_attention_heads": 4, "attention_head_dim": 16, "in_channels": 12, "out_channels": 4,
         "text_dim": 32, "ffn_dim": 64, "image_dim": 20, "added_kv_proj_dim": 64, "pos_embed_seq_len": 34}],
    "flux": [
        {"num_layers": 2, "num_single_layers": 1, "num_attention_heads": 4, "attention_head_dim": 20, "in_channels": 12,
         "joint_attention_dim": 28, "pooled_projection_dim": 10, "guidance_embeds": True, "axes_dims_rope": [4, 8, 8]},
        {"num_layers": 1, "num_single_layers": 3, "num_attention_heads": 2, "attention_head_dim": 16, "in_channels": 16,
         "out_channels": 8, "joint_attention_dim": 32, "pooled_projection_dim": 8, "guidance_embeds": False,
         "axes_dims_rope": [4, 6, 6]}],
    "qwen-image": [
        {"num_layers": 2, "num_attention_heads": 3, "attention_head_dim": 16, "joint_attention_dim": 24,
         "in_channels": 16, "out_channels": 4, "patch_size": 2, "axes_dims_rope": [4, 6, 6]},
        {"num_layers": 12, "num_attention_heads": 16, "attention_head_dim": 96, "joint_attention_dim": 2048,
         "in_channels": 64, "out_channels": 16, "use_additional_t_cond": True, "axes_dims_rope": [16, 40, 40]}],
    "sd3": [
        {"sample_size": 16, "num_layers": 3, "num_attention_heads": 2, "attention_head_dim": 8, "joint_attention_dim": 24,
         "caption_projection_dim": 16, "pooled_projection_dim": 12, "in_channels": 4, "out_channels": None,
         "patch_size": 2, "pos_embed_max_size": 24, "dual_attention_layers": [0]},
        {"num_layers": 12, "num_attention_heads": 12, "attention_head_dim": 64, "joint_attention_dim": 4096,
         "caption_projection_dim": 768, "pooled_projection_dim": 2048, "in_channels": 16, "out_channels": 16,
         "pos_embed_max_size": 96, "qk_norm": "rms_norm", "dual_attention_layers": [0, 1, 2, 3, 4, 5]}],
    "cogvideox": [
        {"num_layers": 2, "num_attention_heads": 2, "attention_head_dim": 16, "text_embed_dim": 24, "time_embed_dim": 12,
         "in_channels": 4, "out_channels": 5, "patch_size": 2, "sample_width": 8, "sample_height": 8, "sample_frames": 5,
         "use_rotary_positional_embeddings": True},
        {"num_layers": 30, "num_attention_heads": 30, "attention_head_dim": 64, "text_embed_dim": 4096,
         "time_embed_dim": 512, "in_channels": 16, "out_channels": 16, "use_rotary_positional_embeddings": False},
        {"num_layers": 4, "num_attention_heads": 8, "attention_head_dim": 64, "in_channels": 32, "out_channels": 16,
         "patch_size": 2, "patch_size_t": 2, "ofs_embed_dim": 512, "use_rotary_positional_embeddings": True,
         "sample_frames": 81}],
    "ltx-video": [
        {"num_layers": 2, "num_attention_heads": 2, "attention_head_dim": 8, "cross_attention_dim": 16,
         "caption_channels": 24, "in_channels": 4, "out_channels": 5},
        {"num_layers": 8, "num_attention_heads": 16, "attention_head_dim": 64, "cross_attention_dim": 1024,
         "caption_channels": 4096, "in_channels": 128, "norm_elementwise_affine": True}],
    "hunyuanvideo": [
        {"num_layers": 2, "num_single_layers": 2, "num_refiner_layers": 2, "num_attention_heads": 2,
         "attention_head_dim": 8, "text_embed_dim": 24, "pooled_projection_dim": 12, "in_channels": 4,
         "out_channels": 5, "patch_size": 2, "patch_size_t": 1, "rope_axes_dim": [2, 2, 4], "mlp_ratio": 3.0},
        {"num_layers": 4, "num_single_layers": 8, "num_refiner_layers": 1, "num_attention_heads": 16,
         "attention_head_dim": 64, "text_embed_dim": 2048, "pooled_projection_dim": 768, "guidance_embeds": False,
         "rope_axes_dim": [16, 24, 24]}],
    "pixart": [  # PixArt-Alpha 1024 (sample_size 128: resolution / aspect-ratio embeddings), affine norms, no bias
        {"num_layers": 2, "num_attention_heads": 3, "attention_head_dim": 8, "cross_attention_dim": 24,
         "caption_channels": 12, "in_channels": 4, "out_channels": None, "sample_size": 128, "patch_size": 2,
         "norm_elementwise_affine": True, "attention_bias": False},
        {"num_layers": 12, "num_attention_heads": 16, "attention_head_dim": 64, "cross_attention_dim": 1024,
         "caption_channels": 4096, "in_channels": 4, "out_channels": 8, "sample_size": 64, "patch_size": 2}],
    # the families of issue 48 (classes with a _cp_plan): a tiny shape with options switched, a mid-sized one
    "flux2": [
        {"num_layers": 2, "num_single_layers": 3, "num_attention_heads": 3, "attention_head_dim": 16,
         "joint_attention_dim": 24, "in_channels": 16, "out_channels": 8, "patch_size": 2, "mlp_ratio": 2.5,
         "axes_dims_rope": [4, 4, 4, 4], "guidance_embeds": True},
        {"num_layers": 4, "num_single_layers": 12, "num_attention_heads": 16, "attention_head_dim": 128,
         "joint_attention_dim": 6144, "in_channels": 128, "timestep_guidance_channels": 128, "guidance_embeds": False}],
    "ltx2": [
        {"in_channels": 8, "out_channels": 6, "num_attention_heads": 3, "attention_head_dim": 8, "cross_attention_dim": 24,
         "audio_in_channels": 4, "audio_out_channels": None, "audio_num_attention_heads": 3,
         "audio_attention_head_dim": 4, "audio_cross_attention_dim": 12, "num_layers": 2, "caption_channels": 16,
         "norm_elementwise_affine": True, "attention_bias": False, "gated_attn": True, "audio_cross_attn_mod": True,
         "use_prompt_adaln_single": False},
        {"num_attention_heads": 16, "attention_head_dim": 64, "cross_attention_dim": 1024,
         "audio_num_attention_heads": 16, "audio_attention_head_dim": 32, "audio_cross_attention_dim": 512,
         "num_layers": 8, "caption_channels": 2048, "cross_attn_mod": True, "audio_gated_attn": True,
         "use_prompt_embeddings": False, "audio_ff_bias": False, "attention_out_bias": False,
         "use_keyframes_abs_pos_embedding": True}],
    "chronoedit": [
        {"num_attention_heads": 3, "attention_head_dim": 8, "in_channels": 8, "out_channels": 4, "text_dim": 16,
         "freq_dim": 16, "ffn_dim": 32, "num_layers": 2, "patch_size": [1, 2, 2], "cross_attn_norm": False},
        {"num_attention_heads": 12, "attention_head_dim": 64, "in_channels": 36, "out_channels": 16, "text_dim": 4096,
         "ffn_dim": 3072, "num_layers": 6, "image_dim": 1280, "added_kv_proj_dim": 768, "pos_embed_seq_len": 514}],
    "helios": [
        {"num_attention_heads": 3, "attention_head_dim": 8, "in_channels": 4, "out_channels": 5, "text_dim": 16,
         "freq_dim": 16, "ffn_dim": 32, "num_layers": 2, "rope_dim": [4, 2, 2], "is_amplify_history": True,
         "cross_attn_norm": False},
        {"num_attention_heads": 12, "attention_head_dim": 128, "num_layers": 6, "ffn_dim": 8960,
         "is_amplify_history": True, "history_scale_mode": "scalar", "has_multi_term_memory_patch": False,
         "added_kv_proj_dim": 1536}],
    "minimax-h3": [  # attention wider than the residual stream, as the published config
        {"num_attention_heads": 3, "attention_head_dim": 8, "hidden_size": 20, "num_layers": 2, "num_refiner_layers": 1,
         "ffn_dim": 28, "in_channels": 4, "audio_in_channels": 6, "patch_size": [1, 2, 2], "text_dim": 16,
         "freq_dim": 8, "time_embed_hidden_dim": 24, "time_embed_dim": 16, "rope_freq_dim": 1},
        {"num_attention_heads": 24, "attention_head_dim": 128, "hidden_size": 2048, "num_layers": 8,
         "num_refiner_layers": 3, "ffn_dim": 8192, "in_channels": 16, "audio_in_channels": 64,
         "patch_size": [1, 1, 1], "text_dim": 4096}],
}
#: SkyReels-V2's and Z-Image's shapes live beside their sharding tests
OTHER_SHAPES.update(__import__("tests.runtime.models.test_skyreels_zimage", fromlist=["OTHER_SHAPES"]).OTHER_SHAPES)
SHAPES = [(fam, i, config) for fam in FAMILIES if fam.count_parameters is not None and fam.name in OTHER_SHAPES
          for i, config in enumerate(OTHER_SHAPES[fam.name])]
#: the families whose split plan is derived keep their shapes (and tests) beside their derivation
DERIVED_SHAPES = __import__("tests.runtime.models.test_derived_family_parameters", fromlist=["OTHER_SHAPES"]).OTHER_SHAPES
#: and the families with a shipped table added with them (HiDream, Cosmos, Wan VACE), beside their sharded tests
TABLE_SHAPES = __import__("tests.runtime.models.test_generic_table_families", fromlist=["OTHER_SHAPES"]).OTHER_SHAPES


def test_every_generic_family_has_a_formula_and_other_shapes():
    assert {f.name for f in FAMILIES} == {f.name for f in FAMILIES if f.count_parameters}
    assert set(OTHER_SHAPES) | set(DERIVED_SHAPES) | set(TABLE_SHAPES) == {f.name for f in FAMILIES if f.count_parameters}


@pytest.mark.parametrize("fam, i, config", SHAPES, ids=[f"{f.name}-{i}" for f, i, _ in SHAPES])
def test_the_family_formula_equals_the_class_on_meta_for_a_folder_of_another_shape(tmp_path, fam, i, config):
    """A checkpoint folder whose shape no preset has: the planner's parameters (its config.json
    recorded in plan.model.diffusers_config, counted by the family's formula) == diffusers on meta."""
    import json

    where = tmp_path / "transformer"
    where.mkdir()
    (where / "config.json").write_text(json.dumps({"_class_name": fam.classes[0], **config}))
    model = resolve_model(ModelSpec(weights=str(tmp_path)))
    assert counted_parameters(model) is None  # no preset of this shape: the formula counts
    ref = meta_parts(fam.classes[0], {k: v for k, v in config.items()})
    assert parameter_parts(model) == ref
