"""LTX-Video (diffusers ``LTXVideoTransformer3DModel``, which carries its own ``_cp_plan``).

Self-attention over video tokens and cross-attention to T5 text tokens in every block; the VAE
compresses 8 frames x 32 x 32 pixels into one 128-channel latent token (patch 1 x 1 x 1). The
``_cp_plan`` splits the text too, so cross-attention is sequence-parallel over it.
"""

from __future__ import annotations

from typing import Any, Mapping

from .base import Family, FamilyPreset, ParameterCount

#: Lightricks/LTX-Video transformer/config.json (2B, v0.9.x) and ltxv-13b-0.9.7-dev (13B).
LTX_VIDEO_2B = {
    "in_channels": 128, "out_channels": 128, "patch_size": 1, "patch_size_t": 1, "num_attention_heads": 32,
    "attention_head_dim": 64, "cross_attention_dim": 2048, "num_layers": 28, "caption_channels": 4096,
}
LTX_VIDEO_13B = {**LTX_VIDEO_2B, "attention_head_dim": 128, "cross_attention_dim": 4096, "num_layers": 48}
TEXT_LEN = 128  # LTXPipeline's max_sequence_length

#: The generate workload's pipeline folder (LTXPipeline, text encoder T5): its sub-folders.
PIPELINE_FOLDERS = ("text_encoder", "tokenizer", "vae", "scheduler", "transformer")


def shape(config: Mapping[str, Any]) -> dict:
    heads, hd = int(config.get("num_attention_heads", 32)), int(config.get("attention_head_dim", 64))
    hidden = heads * hd
    pt, p = int(config.get("patch_size_t", 1)), int(config.get("patch_size", 1))
    return {
        "attention": "cross", "depth": int(config.get("num_layers", 28)), "single_depth": 0,
        "hidden": hidden, "num_heads": heads, "num_kv_heads": heads, "head_dim": hd, "ffn_dim": 4 * hidden,
        "patch": [pt, p, p], "in_channels": int(config.get("in_channels", 128)), "vae_stride": [8, 32, 32],
        "text_len": TEXT_LEN, "text_dim": int(config.get("caption_channels", 4096)), "qk_norm": True,
    }


FAMILY = Family(
    name="ltx-video", title="LTX-Video", classes=("LTXVideoTransformer3DModel",), shape=shape,
    lora_loader="LTXVideoLoraLoaderMixin",
    presets=(FamilyPreset("ltx-video-2b", LTX_VIDEO_2B, "huggingface.co/Lightricks/LTX-Video transformer/config.json",
                          parameters=ParameterCount(1_880_367_104, 67_155_968, 43_018_368)),
             FamilyPreset("ltx-video-13b", LTX_VIDEO_13B,
                          "huggingface.co/Lightricks/LTX-Video ltxv-13b-0.9.7-dev (transformer config: 32 heads x 128, 48 layers, "
                          "cross_attention_dim 4096)",
                          parameters=ParameterCount(12_889_423_872, 268_529_664, 153_145_472))),
    pipeline_folders=PIPELINE_FOLDERS, pipeline_class="LTXPipeline", video=True,
    pipeline_cfg_batched=True,  # [uncond, cond] in one transformer call: parallel.cfg=2 splits it
)
