"""Which format a checkpoint is in and the diffusers config it loads into, from headers and
config.json only (models/checkpoint_format.py, families' ``diffusers_config_from_original``): the
published original releases' config.json files map to their diffusers releases' transformer
configs, key for key.

The configs below are the published files' contents: Wan-AI/Wan2.1-T2V-1.3B and
Wan-AI/Wan2.1-T2V-1.3B-Diffusers (``transformer/config.json``), Wan-AI/Wan2.1-I2V-14B-480P and its
``-Diffusers``, Wan-AI/Wan2.2-TI2V-5B and its ``-Diffusers``; black-forest-labs/FLUX.1-dev's
``transformer/config.json`` for BFL's ``flux1-dev.safetensors`` (whose tensors' shapes say the rest).
"""

from __future__ import annotations

import json
import struct

import pytest

from sporch.orchestrator.models.checkpoint_files import CheckpointError, open_checkpoint
from sporch.orchestrator.models.checkpoint_format import checkpoint_format
from sporch.orchestrator.models.families import flux, wan

WAN_ORIGINAL_1_3B = {"_class_name": "WanModel", "_diffusers_version": "0.30.0", "dim": 1536, "eps": 1e-06,
                     "ffn_dim": 8960, "freq_dim": 256, "in_dim": 16, "model_type": "t2v", "num_heads": 12,
                     "num_layers": 30, "out_dim": 16, "text_len": 512}
WAN_DIFFUSERS_1_3B = {"added_kv_proj_dim": None, "attention_head_dim": 128, "cross_attn_norm": True, "eps": 1e-06,
                      "ffn_dim": 8960, "freq_dim": 256, "image_dim": None, "in_channels": 16, "num_attention_heads": 12,
                      "num_layers": 30, "out_channels": 16, "patch_size": [1, 2, 2],
                      "qk_norm": "rms_norm_across_heads", "rope_max_seq_len": 1024, "text_dim": 4096}
WAN_ORIGINAL_I2V = {"_class_name": "WanModel", "_diffusers_version": "0.30.0", "dim": 5120, "eps": 1e-06,
                    "ffn_dim": 13824, "freq_dim": 256, "in_dim": 36, "model_type": "i2v", "num_heads": 40,
                    "num_layers": 40, "out_dim": 16, "text_len": 512}
WAN_DIFFUSERS_I2V = {**WAN_DIFFUSERS_1_3B, "added_kv_proj_dim": 5120, "image_dim": 1280, "in_channels": 36,
                     "num_attention_heads": 40, "num_layers": 40, "ffn_dim": 13824}
WAN_ORIGINAL_TI2V = {"_class_name": "WanModel",
                     "_diffusers_version": "0.33.0", "dim": 3072, "eps": 1e-06, "ffn_dim": 14336, "freq_dim": 256,
                     "in_dim": 48, "model_type": "ti2v", "num_heads": 24, "num_layers": 30, "out_dim": 48,
                     "text_len": 512}
WAN_DIFFUSERS_TI2V = {**WAN_DIFFUSERS_1_3B, "in_channels": 48, "out_channels": 48, "num_attention_heads": 24,
                      "ffn_dim": 14336}
FLUX_DEV = {"attention_head_dim": 128, "guidance_embeds": True, "in_channels": 64, "joint_attention_dim": 4096,
            "num_attention_heads": 24, "num_layers": 19, "num_single_layers": 38, "patch_size": 1,
            "pooled_projection_dim": 768, "axes_dims_rope": [16, 56, 56], "out_channels": None}


def header_file(path, shapes: dict) -> None:
    """A safetensors file of zero-filled F16 tensors of ``shapes`` (headers are what is read)."""
    header, offset = {}, 0
    for name, shape in shapes.items():
        n = 2
        for s in shape:
            n *= s
        header[name] = {"dtype": "F16", "shape": list(shape), "data_offsets": [offset, offset + n]}
        offset += n
    raw = json.dumps(header).encode()
    path.write_bytes(struct.pack("<Q", len(raw)) + raw + b"\0" * offset)


def wan_shapes(dim: int, layers: int = 1, image: int | None = None) -> dict:
    shapes = {"head.modulation": (1, 2, dim), "blocks.0.self_attn.q.weight": (dim, dim)}
    if image:
        shapes["img_emb.proj.0.weight"] = (image,)
    return shapes


@pytest.mark.parametrize("original,diffusers,image", [
    (WAN_ORIGINAL_1_3B, WAN_DIFFUSERS_1_3B, None), (WAN_ORIGINAL_I2V, WAN_DIFFUSERS_I2V, 1280),
    (WAN_ORIGINAL_TI2V, WAN_DIFFUSERS_TI2V, None)])
def test_a_published_wan_config_maps_to_its_diffusers_release(original, diffusers, image):
    got = wan.diffusers_config_from_original(original, wan_shapes(original["dim"], image=image))
    assert got.pop("_class_name") == "WanTransformer3DModel"
    assert got.pop("pos_embed_seq_len") is None
    assert got == diffusers


def test_the_format_is_told_from_the_tensors_and_config(tmp_path):
    header_file(tmp_path / "diffusion_pytorch_model.safetensors", wan_shapes(1536))
    (tmp_path / "config.json").write_text(json.dumps(WAN_ORIGINAL_1_3B))
    fmt = checkpoint_format(open_checkpoint(tmp_path))
    assert (fmt.family, fmt.fmt, fmt.class_name, fmt.prefix) == ("wan", "original", "WanTransformer3DModel", "")
    # ComfyUI's repackaging: the same names under model.diffusion_model.
    comfy = tmp_path / "comfy"
    comfy.mkdir()
    header_file(comfy / "wan.safetensors", {"model.diffusion_model." + k: v for k, v in wan_shapes(1536).items()})
    fmt = checkpoint_format(open_checkpoint(comfy / "wan.safetensors"), known={"_class_name": "WanTransformer3DModel"})
    assert (fmt.fmt, fmt.prefix, fmt.config) == ("original", "model.diffusion_model.", {"_class_name": "WanTransformer3DModel"})
    # a diffusers folder: its config.json names the class
    folder = tmp_path / "diffusers" / "transformer"
    folder.mkdir(parents=True)
    header_file(folder / "diffusion_pytorch_model.safetensors", {"scale_shift_table": (1, 2, 1536)})
    (folder / "config.json").write_text(json.dumps({"_class_name": "WanTransformer3DModel", **WAN_DIFFUSERS_1_3B}))
    fmt = checkpoint_format(open_checkpoint(tmp_path / "diffusers"))
    assert (fmt.family, fmt.fmt, fmt.original) == ("wan", "diffusers", None)


def flux_dev_shapes(double: int = 19, single: int = 38, guidance: bool = True) -> dict:
    d = 3072
    shapes = {"img_in.weight": (d, 64), "txt_in.weight": (d, 4096), "vector_in.in_layer.weight": (d, 768),
              "final_layer.linear.weight": (64, d)}
    if guidance:
        shapes["guidance_in.in_layer.weight"] = (d, 256)
    for i in range(double):
        shapes[f"double_blocks.{i}.img_attn.norm.query_norm.scale"] = (128,)
        shapes[f"double_blocks.{i}.img_attn.norm.key_norm.scale"] = (128,)
        shapes[f"double_blocks.{i}.img_mlp.0.weight"] = (4 * d, d)
    for i in range(single):
        shapes[f"single_blocks.{i}.linear1.weight"] = (3 * d + 4 * d, d)
    return shapes


def test_bfl_flux_dev_shapes_give_the_published_config(tmp_path):
    assert flux.diffusers_config_from_original({}, flux_dev_shapes()) == {"_class_name": "FluxTransformer2DModel",
                                                                         **FLUX_DEV}
    schnell = flux.diffusers_config_from_original({}, flux_dev_shapes(guidance=False))
    assert schnell["guidance_embeds"] is False
    header_file(tmp_path / "flux1-dev.safetensors", flux_dev_shapes(2, 3))
    fmt = checkpoint_format(open_checkpoint(tmp_path / "flux1-dev.safetensors"))
    assert (fmt.family, fmt.fmt, fmt.config["num_layers"], fmt.config["num_single_layers"]) == ("flux", "original", 2, 3)


@pytest.mark.parametrize("config,shapes,message", [
    ({**WAN_ORIGINAL_1_3B, "model_type": "vace"}, wan_shapes(1536), r"model_type: 'vace' is not loadable"),
    ({**WAN_ORIGINAL_1_3B, "model_type": "flf2v"}, wan_shapes(1536), r"model_type: 'flf2v' is not loadable"),
    ({**WAN_ORIGINAL_1_3B, "window_size": [256, 256]}, wan_shapes(1536), r"attends globally"),
    ({**WAN_ORIGINAL_1_3B, "num_heads": 7}, wan_shapes(1536), r"num_heads: 7 must divide dim 1536"),
    ({**WAN_ORIGINAL_1_3B, "sparse_attention": True}, wan_shapes(1536), r"sparse_attention: is not a WanModel \(original release\) config key"),
    ({k: v for k, v in WAN_ORIGINAL_1_3B.items() if k != "num_heads"}, wan_shapes(1536), r"num_heads: is not given"),
])
def test_an_original_wan_config_the_class_cannot_be_is_one_line(tmp_path, config, shapes, message):
    header_file(tmp_path / "model.safetensors", shapes)
    (tmp_path / "config.json").write_text(json.dumps(config))
    with pytest.raises(CheckpointError, match=message) as info:
        checkpoint_format(open_checkpoint(tmp_path))
    assert "\n" not in str(info.value) and str(tmp_path) in str(info.value)


def test_a_flux_file_of_another_head_size_needs_its_rope_axes(tmp_path):
    shapes = {k: tuple(64 if s == 128 else s for s in v) for k, v in flux_dev_shapes(1, 1).items()}
    header_file(tmp_path / "flux.safetensors", shapes)
    with pytest.raises(CheckpointError, match=r"64-wide heads .* name the model's preset"):
        checkpoint_format(open_checkpoint(tmp_path / "flux.safetensors"))
    known = {"_class_name": "FluxTransformer2DModel", "axes_dims_rope": [8, 28, 28]}
    assert checkpoint_format(open_checkpoint(tmp_path / "flux.safetensors"), known).config == known


def test_a_file_without_config_or_original_names_is_one_line(tmp_path):
    header_file(tmp_path / "x.safetensors", {"a.weight": (2, 2)})
    with pytest.raises(CheckpointError, match=r"no config\.json names its diffusers class") as info:
        checkpoint_format(open_checkpoint(tmp_path / "x.safetensors"))
    assert "\n" not in str(info.value)
