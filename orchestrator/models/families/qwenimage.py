"""Qwen-Image (diffusers ``QwenImageTransformer2DModel``, which carries its own ``_cp_plan``).

Joint text+image attention over 60 dual-stream blocks; latents from a Wan-style VAE (8 x 8 pixels
per latent, 16 channels) packed 2 x 2 into 64 channels; text from Qwen2.5-VL-7B (3584 wide).
"""

from __future__ import annotations

from typing import Any, Mapping

from .base import Family, FamilyPreset, ParameterCount

#: The published transformer config: Qwen/Qwen-Image, transformer/config.json (Hugging Face).
QWEN_IMAGE_20B = {
    "patch_size": 2, "in_channels": 64, "out_channels": 16, "num_layers": 60, "attention_head_dim": 128,
    "num_attention_heads": 24, "joint_attention_dim": 3584, "guidance_embeds": False,
    "axes_dims_rope": [16, 56, 56],
}
#: The generate workload's pipeline folder (QwenImagePipeline, text encoder Qwen2.5-VL): its sub-folders.
PIPELINE_FOLDERS = ("text_encoder", "tokenizer", "vae", "scheduler", "transformer")
TEXT_LEN = 1024  # the pipeline's prompt length bound (max_sequence_length 1024 in QwenImagePipeline)


def shape(config: Mapping[str, Any]) -> dict:
    heads, hd = int(config.get("num_attention_heads", 24)), int(config.get("attention_head_dim", 128))
    hidden = heads * hd
    p = int(config.get("patch_size", 2))
    return {
        "attention": "joint", "depth": int(config.get("num_layers", 60)), "single_depth": 0,
        "hidden": hidden, "num_heads": heads, "num_kv_heads": heads, "head_dim": hd, "ffn_dim": 4 * hidden,
        # packed latents: in_channels = latent channels x p x p
        "patch": [1, p, p], "in_channels": int(config.get("in_channels", 64)) // (p * p),
        "vae_stride": [1, 8, 8], "text_len": TEXT_LEN, "text_dim": int(config.get("joint_attention_dim", 3584)),
        "qk_norm": True,
    }


FAMILY = Family(
    name="qwen-image", title="Qwen-Image", classes=("QwenImageTransformer2DModel",), shape=shape,
    lora_loader="QwenImageLoraLoaderMixin",
    presets=(FamilyPreset("qwen-image", QWEN_IMAGE_20B,
                          "huggingface.co/Qwen/Qwen-Image transformer/config.json (20B)",
                          parameters=ParameterCount(20_389_877_760, 339_831_296, 40_523_328)),),
    pipeline_folders=PIPELINE_FOLDERS, pipeline_class="QwenImagePipeline",
    pipeline_cfg_batched=False,  # true CFG: a cond and an uncond transformer call per step
)
