"""ChronoEdit (diffusers ``ChronoEditTransformer3DModel``, which carries its own ``_cp_plan``).

Wan2.1 I2V 14B's transformer with ChronoEdit's RoPE (temporal reasoning frames skipped): image
editing as a short video whose first frame is the input image. Self-attention over the video
tokens (split over the sequence ranks with their RoPE tables at the first block), cross-attention to
umT5 text and CLIP image tokens, which stay whole on every rank (local cross-attention).
"""

from __future__ import annotations

from typing import Any, Mapping, Optional

from .base import Family, FamilyPreset, ParameterCount, linear
from .wan_blocks import wan_block, wan_embeddings
from . import wan

#: nvidia/ChronoEdit-14B-Diffusers' transformer: the network github.com/nv-tlabs/ChronoEdit
#: chronoedit/_src/configs/chronoedit/defaults/net.py declares (WAN2PT1_14B_Edit: dim 5120, 40 heads, 40
#: layers, FFN 13824, frequency 256, in 36 / out 16 channels, model_type i2v, text length 512), in
#: diffusers' Wan I2V names: the i2v model's CLIP image projection (image_dim 1280, the CLIP ViT-H width) and
#: image keys/values (added_kv_proj_dim = dim), umT5's 4096-wide text
CHRONOEDIT_14B = {"patch_size": [1, 2, 2], "num_attention_heads": 40, "attention_head_dim": 128, "in_channels": 36,
                  "out_channels": 16, "text_dim": 4096, "freq_dim": 256, "ffn_dim": 13824, "num_layers": 40,
                  "cross_attn_norm": True, "qk_norm": "rms_norm_across_heads", "eps": 1e-6, "image_dim": 1280,
                  "added_kv_proj_dim": 5120}

TEXT_LEN = 512  # ChronoEditPipeline's max_sequence_length (besides the 257 CLIP image tokens)


def pipeline_parts(preset: Optional[str]) -> Optional[Mapping[str, Any]]:
    """ChronoEditPipeline's parts are Wan2.1 I2V's (umT5-XXL, the CLIP ViT-H image encoder, AutoencoderKLWan:
    the ChronoEdit docs load ``CLIPVisionModel`` and ``AutoencoderKLWan`` from the folder)."""
    return wan.PARTS_I2V if preset == "chronoedit-14b" else None


def shape(config: Mapping[str, Any]) -> dict:
    heads, hd = int(config.get("num_attention_heads", 40)), int(config.get("attention_head_dim", 128))
    patch = [int(p) for p in config.get("patch_size", (1, 2, 2))]
    return {
        "attention": "cross", "depth": int(config.get("num_layers", 40)), "single_depth": 0,
        "hidden": heads * hd, "num_heads": heads, "num_kv_heads": heads, "head_dim": hd,
        "ffn_dim": int(config.get("ffn_dim", 13824)), "patch": patch, "in_channels": int(config.get("in_channels", 16)),
        "vae_stride": [4, 8, 8], "text_len": TEXT_LEN, "text_dim": int(config.get("text_dim", 4096)),
        "qk_norm": bool(config.get("qk_norm", "rms_norm_across_heads")),
    }


def count_parameters(config: Mapping[str, Any]) -> ParameterCount:
    """ChronoEditTransformer3DModel's parameters from its config.json (diffusers 0.42.1's layers: Wan2.1's
    blocks and embeddings, ``wan_blocks``; the patch embedding, output projection and table)."""
    heads, hd = int(config.get("num_attention_heads", 40)), int(config.get("attention_head_dim", 128))
    h = heads * hd
    patch = 1
    for p in config.get("patch_size", (1, 2, 2)):
        patch *= int(p)
    c_in = int(config.get("in_channels", 16))
    c_out = int(config.get("out_channels", 16) or c_in)
    block = wan_block(config)
    root = c_in * patch * h + h + wan_embeddings(config) + linear(h, c_out * patch) + 2 * h
    depth = int(config.get("num_layers", 40))
    return ParameterCount(blocks=depth * block, largest_block=block if depth else 0, root=root)


FAMILY = Family(
    name="chronoedit", title="ChronoEdit", classes=("ChronoEditTransformer3DModel",), shape=shape,
    text_split=False, lora_loader="WanLoraLoaderMixin", step_cache=(),
    step_cache_refusal=(
        "its blocks (diffusers' ChronoEdit WanTransformerBlock, a class of its own) are not in diffusers'"
        " TransformerBlockRegistry, which the step caches read a block's outputs from"),
    presets=(FamilyPreset("chronoedit-14b", CHRONOEDIT_14B,
                          "github.com/nv-tlabs/ChronoEdit chronoedit/_src/configs/chronoedit/defaults/net.py (the 14B "
                          "network of nvidia/ChronoEdit-14B-Diffusers), in diffusers' Wan I2V config names",
                          parameters=ParameterCount(16_153_538_560, 403_838_464, 241_340_224)),),
    count_parameters=count_parameters, pipeline_parts=pipeline_parts,
)
