"""LTX-Video (diffusers ``LTXVideoTransformer3DModel``, which carries its own ``_cp_plan``).

Self-attention over video tokens and cross-attention to T5 text tokens in every block; the VAE
compresses 8 frames x 32 x 32 pixels into one 128-channel latent token (patch 1 x 1 x 1). The
``_cp_plan`` splits the text too, so cross-attention is sequence-parallel over it.
"""

from __future__ import annotations

from typing import Any, Mapping, Optional

from .base import T5_XXL_ENCODER, Family, PipelineCfg, FamilyPreset, ParameterCount, feed_forward, linear, qk_norm_parameters
from .config_rules import Flag, Int, Number, Text

#: Lightricks/LTX-Video transformer/config.json (2B, v0.9.x) and ltxv-13b-0.9.7-dev (13B).
LTX_VIDEO_2B = {
    "in_channels": 128, "out_channels": 128, "patch_size": 1, "patch_size_t": 1, "num_attention_heads": 32,
    "attention_head_dim": 64, "cross_attention_dim": 2048, "num_layers": 28, "caption_channels": 4096,
}
LTX_VIDEO_13B = {**LTX_VIDEO_2B, "attention_head_dim": 128, "cross_attention_dim": 4096, "num_layers": 48}
TEXT_LEN = 128  # LTXPipeline's max_sequence_length

#: The generate workload's pipeline folder (LTXPipeline, text encoder T5): its sub-folders.
PIPELINE_FOLDERS = ("text_encoder", "tokenizer", "vae", "scheduler", "transformer")


#: The published pipelines' other parts (plan/pipeline_estimate.py's memory estimate; keys as wan.PARTS).
#: huggingface.co/Lightricks/LTX-Video text_encoder/config.json: T5EncoderModel (T5 v1.1 XXL: 24 layers x 4096,
#: FFN 10240, vocabulary 32128), the same for 2B and 13B. vae/config.json: AutoencoderKLLTXVideo; 2B (0.9.1):
#: block_out_channels [128, 256, 512, 512], decoder_layers_per_block [4, 3, 3, 3, 4], timestep_conditioning;
#: 13B (0.9.7, the VAE of 0.9.5 on): decoder_block_out_channels [256, 512, 1024], decoder_layers_per_block
#: [5, 5, 5, 5], decoder noise injection. Its decoder ends at 1/4 of the resolution (patch 4: 16 pixels per
#: position), so per output pixel it holds 128 / 16 = 8 (2B) or 256 / 16 = 16 (13B) channels, for every frame
#: at once (no framewise decoding by default). Counted with those configs on the meta device (transformers,
#: diffusers 0.42.1; tests/runtime/models/test_generic_pipeline_parts.py).
PARTS_2B: dict[str, Any] = {
    **T5_XXL_ENCODER,
    "vae": "AutoencoderKLLTXVideo (0.9.1)", "vae_parameters": 439_557_682, "vae_channels": 8,
    "vae_chunk_frames": 1 << 16, "vae_tile_pixels": 512 * 512}
PARTS_13B = {**PARTS_2B, "vae": "AutoencoderKLLTXVideo (0.9.5+)", "vae_parameters": 750_924_722, "vae_channels": 16}


def pipeline_parts(preset: Optional[str]) -> Optional[Mapping[str, Any]]:
    """The published LTX-Video pipelines' text encoder and VAE, by preset."""
    return {"ltx-video-2b": PARTS_2B, "ltx-video-13b": PARTS_13B}.get(preset or "")


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


def count_parameters(config: Mapping[str, Any]) -> ParameterCount:
    """LTXVideoTransformer3DModel's parameters from its config.json (diffusers 0.42.1's layers; the
    class's defaults for absent keys): blocks (self-attention, cross-attention to the projected caption
    with ``cross_attention_dim``-wide keys and values, q/k norms across heads, FFN, a 6-way scale/shift
    table) and the root (input projection, timestep MLP and its 6-way modulation, caption projection,
    output table and projection)."""
    heads, hd = int(config.get("num_attention_heads", 32)), int(config.get("attention_head_dim", 64))
    h = heads * hd
    cross = int(config.get("cross_attention_dim", 2048))
    bias, out_bias = bool(config.get("attention_bias", True)), bool(config.get("attention_out_bias", True))
    norm = 2 * qk_norm_parameters(config.get("qk_norm", "rms_norm_across_heads"), h)
    affine = h if config.get("norm_elementwise_affine", False) else 0
    block = (6 * h + 2 * affine
             + norm + 3 * linear(h, h, bias) + linear(h, h, out_bias)  # self-attention
             + norm + linear(h, h, bias) + 2 * linear(cross, h, bias) + linear(h, h, out_bias)  # cross-attention
             + feed_forward(h, 4 * h))
    c_in = int(config.get("in_channels", 128))
    c_out = int(config.get("out_channels", 128) or c_in)
    root = (2 * h + linear(c_in, h) + linear(256, h) + linear(h, h) + linear(h, 6 * h)
            + linear(int(config.get("caption_channels", 4096)), h) + linear(h, h) + linear(h, c_out))
    depth = int(config.get("num_layers", 28))
    return ParameterCount(blocks=depth * block, largest_block=block if depth else 0, root=root)


def vae_parallel_refusal(vae_config: Mapping[str, Any]) -> Optional[str]:
    """A decoder that injects noise drawn for the rows it has (``decoder_inject_noise``: LTX-Video
    0.9.1's VAE) decodes other noise on a band than on the whole image."""
    if any(vae_config.get("decoder_inject_noise") or ()):
        return (f"its {vae_config.get('_class_name', 'VAE')} injects decoder noise drawn for the rows it has "
                "(vae/config.json decoder_inject_noise), which a band of rows would draw differently")
    return None


#: LTXVideoTransformer3DModel's constructor arguments (diffusers 0.42.1) and their values.
CONFIG_KEYS = {
    "in_channels": Int(), "out_channels": Int(optional=True), "patch_size": Int(), "patch_size_t": Int(),
    "num_attention_heads": Int(), "attention_head_dim": Int(2), "cross_attention_dim": Int(), "num_layers": Int(),
    "activation_fn": Text(), "qk_norm": Text("rms_norm_across_heads"), "norm_elementwise_affine": Flag(),
    "norm_eps": Number(0, 1, open_min=True), "caption_channels": Int(), "attention_bias": Flag(),
    "attention_out_bias": Flag()}


FAMILY = Family(
    name="ltx-video", title="LTX-Video", classes=("LTXVideoTransformer3DModel",), shape=shape,
    lora_loader="LTXVideoLoraLoaderMixin",
    presets=(FamilyPreset("ltx-video-2b", LTX_VIDEO_2B, "huggingface.co/Lightricks/LTX-Video transformer/config.json",
                          parameters=ParameterCount(1_880_367_104, 67_155_968, 43_018_368)),
             FamilyPreset("ltx-video-13b", LTX_VIDEO_13B,
                          "huggingface.co/Lightricks/LTX-Video ltxv-13b-0.9.7-dev (transformer config: 32 heads x 128, 48 layers, "
                          "cross_attention_dim 4096)",
                          parameters=ParameterCount(12_889_423_872, 268_529_664, 153_145_472))),
    pipeline_folders=PIPELINE_FOLDERS, pipeline_class="LTXPipeline", video=True, pipeline_parts=pipeline_parts,
    count_parameters=count_parameters,
    pipeline_cfg=PipelineCfg.BATCHED,  # [uncond, cond] in one transformer call: parallel.cfg=2 splits its rows
    vae_tiling=True,  # AutoencoderKLLTXVideo.enable_tiling: 512 x 512-pixel tiles
    vae_class="AutoencoderKLLTXVideo",
    vae_parallel=True, vae_parallel_refusal=vae_parallel_refusal,  # not a 0.9.1 VAE injecting decoder noise
    config_keys=CONFIG_KEYS,
)
