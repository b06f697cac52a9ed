"""Qwen-Image (diffusers ``QwenImageTransformer2DModel``, which carries its own ``_cp_plan``).

Joint text+image attention over 60 dual-stream blocks; latents from a Wan-style VAE (8 x 8 pixels
per latent, 16 channels) packed 2 x 2 into 64 channels; text from Qwen2.5-VL-7B (3584 wide).
"""

from __future__ import annotations

from typing import Any, Mapping, Optional

from .base import Family, PipelineCfg, FamilyPreset, ParameterCount, feed_forward, linear
from .config_rules import Flag, Int, Ints, head_dim_problem, rope_axes_problem

#: The published transformer config: Qwen/Qwen-Image, transformer/config.json (Hugging Face).
QWEN_IMAGE_20B = {
    "patch_size": 2, "in_channels": 64, "out_channels": 16, "num_layers": 60, "attention_head_dim": 128,
    "num_attention_heads": 24, "joint_attention_dim": 3584, "guidance_embeds": False,
    "axes_dims_rope": [16, 56, 56],
}
#: The generate workload's pipeline folder (QwenImagePipeline, text encoder Qwen2.5-VL): its sub-folders.
PIPELINE_FOLDERS = ("text_encoder", "tokenizer", "vae", "scheduler", "transformer")
TEXT_LEN = 1024  # the pipeline's prompt length bound (max_sequence_length 1024 in QwenImagePipeline)

#: The published pipeline's other parts (plan/pipeline_estimate.py's memory estimate; keys as wan.PARTS),
#: huggingface.co/Qwen/Qwen-Image text_encoder/config.json: Qwen2_5_VLForConditionalGeneration, Qwen2.5-VL-7B
#: (language model 28 layers x 3584, GQA 4 KV heads, FFN 18944, vocabulary 152064, embedding and LM head
#: untied; vision tower 32 layers x 1280), and vae/config.json: AutoencoderKLQwenImage (base_dim 96, z_dim 16,
#: dim_mult [1, 2, 4, 4]: 96 decoder channels at full resolution). Counted with those configs on the meta
#: device (transformers, diffusers 0.42.1; tests/runtime/models/test_generic_pipeline_parts.py).
PARTS: dict[str, Any] = {
    "text_encoder": "Qwen2.5-VL-7B (Qwen2_5_VLForConditionalGeneration)", "text_encoder_parameters": 8_292_166_656,
    "text_encoder_layers": 28 + 32, "text_encoder_embedding": 152_064 * 3584,
    "text_encoder_layer": 233_057_792,  # a language-model layer (a vision block: 39.4 M)
    "vae": "AutoencoderKLQwenImage", "vae_parameters": 126_892_531, "vae_channels": 96, "vae_chunk_frames": 1,
    "vae_tile_pixels": 256 * 256}


def pipeline_parts(preset: Optional[str]) -> Optional[Mapping[str, Any]]:
    """The published Qwen-Image pipeline's text encoder and VAE (its one preset)."""
    return PARTS if preset == "qwen-image" else None


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


def count_parameters(config: Mapping[str, Any]) -> ParameterCount:
    """QwenImageTransformer2DModel's parameters from its config.json (diffusers 0.42.1's layers; the
    class's defaults for absent keys): dual-stream blocks (an image and a text stream, each with its
    modulation, q/k/v/out projections and FFN, RMS q/k norms) and the root (timestep MLP, text norm and
    projections, output norm and projection)."""
    heads, hd = int(config.get("num_attention_heads", 24)), int(config.get("attention_head_dim", 128))
    h, p = heads * hd, int(config.get("patch_size", 2))
    c_in = int(config.get("in_channels", 64))
    c_out = int(config.get("out_channels", 16) or c_in)
    text = int(config.get("joint_attention_dim", 3584))
    block = 2 * linear(h, 6 * h) + 8 * linear(h, h) + 4 * hd + 2 * feed_forward(h, 4 * h)
    root = (linear(256, h) + linear(h, h) + (2 * h if config.get("use_additional_t_cond") else 0)
            + text + linear(c_in, h) + linear(text, h) + linear(h, 2 * h) + linear(h, p * p * c_out))
    depth = int(config.get("num_layers", 60))
    return ParameterCount(blocks=depth * block, largest_block=block if depth else 0, root=root)


#: QwenImageTransformer2DModel's constructor arguments (diffusers 0.42.1) and their values.
CONFIG_KEYS = {
    "patch_size": Int(), "in_channels": Int(), "out_channels": Int(optional=True), "num_layers": Int(),
    "attention_head_dim": Int(2), "num_attention_heads": Int(), "joint_attention_dim": Int(), "guidance_embeds": Flag(),
    "axes_dims_rope": Ints(3, minimum=0), "zero_cond_t": Flag(), "use_additional_t_cond": Flag(),
    "use_layer3d_rope": Flag()}


def config_rules(config: Mapping[str, Any]) -> Optional[tuple[str, str]]:
    """Packed latents (``in_channels`` = latent channels x patch x patch) and three even RoPE axes
    summing to the head width."""
    p, c = config.get("patch_size", 2), config.get("in_channels", 64)
    if c % (p * p):
        return "in_channels", f"{c} must be a multiple of patch_size x patch_size = {p * p} (packed latent channels)"
    return head_dim_problem(config, default=128) or rope_axes_problem(config, "axes_dims_rope", (16, 56, 56),
                                                                     default_head=128)

FAMILY = Family(
    name="qwen-image", title="Qwen-Image", classes=("QwenImageTransformer2DModel",), shape=shape,
    lora_loader="QwenImageLoraLoaderMixin",
    presets=(FamilyPreset("qwen-image", QWEN_IMAGE_20B,
                          "huggingface.co/Qwen/Qwen-Image transformer/config.json (20B)",
                          parameters=ParameterCount(20_389_877_760, 339_831_296, 40_523_328)),),
    pipeline_folders=PIPELINE_FOLDERS, pipeline_class="QwenImagePipeline", pipeline_parts=pipeline_parts,
    count_parameters=count_parameters,
    pipeline_cfg=PipelineCfg.TWO_CALLS,  # true CFG: a "cond" then an "uncond" call per step, one per cfg rank
    vae_tiling=True,  # AutoencoderKLQwenImage.enable_tiling: 256 x 256-pixel tiles
    vae_class="AutoencoderKLQwenImage", vae_parallel=True,
    config_keys=CONFIG_KEYS, config_rules=config_rules,
)
