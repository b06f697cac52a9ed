"""Stable Diffusion 3 / 3.5 (diffusers ``SD3Transformer2DModel``, which has no ``_cp_plan``: sporch
ships the split plan below).

MMDiT joint attention ([image, text] concatenated inside each block's attention); SD3.5 Medium adds
a second, image-only self-attention in its first 13 blocks (``dual_attention_layers``), which runs
sequence-parallel like the joint one. Latents: 16 channels, 8 x 8 pixels each, patch 2 x 2.
"""

from __future__ import annotations

from typing import Any, Mapping, Optional

from .base import T5_XXL_EMBEDDING, T5_XXL_LAYER, T5_XXL_LAYERS, T5_XXL_PARAMETERS, Family, FamilyPreset, ParameterCount, PipelineCfg, feed_forward, linear, qk_norm_parameters
from .config_rules import Int, Ints, Text
from .plan_format import GatherOutput, SplitInput

#: image tokens split after the patch embedding (which adds the position table), text tokens
#: split as they enter (the context embedder is per token), whole output gathered at proj_out
#: (the unpatchify after it reads the input's height and width).
SD3_PLAN = {
    "": {"encoder_hidden_states": SplitInput(split_dim=1, expected_dims=3)},
    "pos_embed": {0: SplitInput(split_dim=1, expected_dims=3, split_output=True)},
    "proj_out": GatherOutput(gather_dim=1, expected_dims=3),
}

#: stabilityai/stable-diffusion-3.5-large and -medium, transformer/config.json (Hugging Face).
SD35_LARGE = {"sample_size": 128, "patch_size": 2, "in_channels": 16, "num_layers": 38, "attention_head_dim": 64,
              "num_attention_heads": 38, "joint_attention_dim": 4096, "caption_projection_dim": 2432,
              "pooled_projection_dim": 2048, "out_channels": 16, "pos_embed_max_size": 192, "qk_norm": "rms_norm"}
SD35_MEDIUM = {"sample_size": 128, "patch_size": 2, "in_channels": 16, "num_layers": 24, "attention_head_dim": 64,
               "num_attention_heads": 24, "joint_attention_dim": 4096, "caption_projection_dim": 1536,
               "pooled_projection_dim": 2048, "out_channels": 16, "pos_embed_max_size": 384, "qk_norm": "rms_norm",
               "dual_attention_layers": list(range(13))}
#: The generate workload's pipeline folder (StableDiffusion3Pipeline): two CLIP text encoders and T5
#: (text_encoder_3/ may be absent from a folder: diffusers then uses zeros for the T5 part).
PIPELINE_FOLDERS = ("text_encoder", "tokenizer", "text_encoder_2", "tokenizer_2", "vae", "scheduler", "transformer")
TEXT_LEN = 333  # CLIP-L/G 77 + T5 256 tokens (StableDiffusion3Pipeline's default max_sequence_length)

#: The published pipelines' other parts (plan/pipeline_estimate.py's memory estimate; keys as wan.PARTS), the
#: same in stabilityai/stable-diffusion-3.5-large and -medium: text_encoder/ CLIPTextModelWithProjection (CLIP-L:
#: 12 layers x 768), text_encoder_2/ CLIPTextModelWithProjection (OpenCLIP bigG: 32 layers x 1280),
#: text_encoder_3/ T5EncoderModel (T5 v1.1 XXL: 24 layers x 4096, FFN 10240, vocabulary 32128), vae/
#: AutoencoderKL (16 latent channels, block_out_channels [128, 256, 512, 512]: 128 decoder channels at full
#: resolution, sample_size 1024). Counted with those config.json files on the meta device (transformers,
#: diffusers 0.42.1; tests/runtime/models/test_generic_pipeline_parts.py).
PARTS: dict[str, Any] = {
    "text_encoder": "CLIP-L + CLIP-G (CLIPTextModelWithProjection) + T5-XXL encoder",
    "text_encoder_parameters": 123_650_304 + 694_659_840 + T5_XXL_PARAMETERS, "text_encoder_layers": 12 + 32 + T5_XXL_LAYERS,
    "text_encoder_embedding": T5_XXL_EMBEDDING, "text_encoder_layer": T5_XXL_LAYER,  # T5's (CLIP-G's: 19.7 M)
    "vae": "AutoencoderKL (16 channels)", "vae_parameters": 83_819_683, "vae_channels": 128, "vae_chunk_frames": 1,
    "vae_tile_pixels": 1024 * 1024}


def pipeline_parts(preset: Optional[str]) -> Optional[Mapping[str, Any]]:
    """The published SD3.5 pipelines' text encoders and VAE (Large and Medium share them)."""
    return PARTS if (preset or "").startswith("sd3.5-") else None


def shape(config: Mapping[str, Any]) -> dict:
    heads, hd = int(config.get("num_attention_heads", 24)), int(config.get("attention_head_dim", 64))
    hidden = heads * hd
    p = int(config.get("patch_size", 2))
    return {
        "attention": "joint", "depth": int(config.get("num_layers", 24)), "single_depth": 0, "hidden": hidden,
        "num_heads": heads, "num_kv_heads": heads, "head_dim": hd, "ffn_dim": 4 * hidden, "patch": [1, p, p],
        "in_channels": int(config.get("in_channels", 16)), "vae_stride": [1, 8, 8], "text_len": TEXT_LEN,
        "text_dim": int(config.get("joint_attention_dim", 4096)), "qk_norm": bool(config.get("qk_norm")),
    }


def count_parameters(config: Mapping[str, Any]) -> ParameterCount:
    """SD3Transformer2DModel's parameters from its config.json (diffusers 0.42.1's layers; the class's
    defaults for absent keys): joint blocks (image and text modulation, joint q/k/v/out, both FFNs; the
    last block's text stream ends at its attention: no text output projection or FFN, a 2-way norm), the
    second, image-only attention and 9-way modulation of ``dual_attention_layers`` (SD3.5 Medium), and the
    root (patch embedding, timestep and pooled-text MLPs, text projection, output norm and projection)."""
    heads, hd = int(config.get("num_attention_heads", 18)), int(config.get("attention_head_dim", 64))
    h, p = heads * hd, int(config.get("patch_size", 2))
    c_in = int(config.get("in_channels", 16))
    c_out = int(config.get("out_channels") or c_in) if config.get("out_channels", 16) is not None else c_in
    depth = int(config.get("num_layers", 18))
    dual = {int(i) for i in (config.get("dual_attention_layers") or ())}
    norm = qk_norm_parameters(config.get("qk_norm"), hd)
    blocks = []
    for i in range(depth):
        last = i == depth - 1
        block = linear(h, (9 if i in dual else 6) * h) + linear(h, (2 if last else 6) * h)
        block += 7 * linear(h, h) + (0 if last else linear(h, h)) + 4 * norm  # joint q/k/v (x2), out (+ text out)
        block += feed_forward(h, 4 * h) * (1 if last else 2)
        if i in dual:
            block += 4 * linear(h, h) + 2 * norm
        blocks.append(block)
    caption = int(config.get("caption_projection_dim", 1152))
    root = (c_in * p * p * h + h + linear(256, h) + linear(h, h) + linear(int(config.get("pooled_projection_dim", 2048)), h)
            + linear(h, h) + linear(int(config.get("joint_attention_dim", 4096)), caption) + linear(h, 2 * h)
            + linear(h, p * p * c_out))
    return ParameterCount(blocks=sum(blocks), largest_block=max(blocks, default=0), root=root)


#: SD3Transformer2DModel's constructor arguments (diffusers 0.42.1) and their values.
CONFIG_KEYS = {
    "sample_size": Int(), "patch_size": Int(), "in_channels": Int(), "num_layers": Int(), "attention_head_dim": Int(),
    "num_attention_heads": Int(), "joint_attention_dim": Int(), "caption_projection_dim": Int(),
    "pooled_projection_dim": Int(), "out_channels": Int(optional=True), "pos_embed_max_size": Int(),
    "dual_attention_layers": Ints(minimum=0), "qk_norm": Text("rms_norm", "layer_norm", None)}


def config_rules(config: Mapping[str, Any]) -> Optional[tuple[str, str]]:
    """The blocks with a second attention must exist."""
    depth = config.get("num_layers", 18)
    late = [i for i in config.get("dual_attention_layers", ()) if i >= depth]
    if late:
        return "dual_attention_layers", f"{late} name blocks past num_layers {depth}"
    return None

FAMILY = Family(
    name="sd3", title="Stable Diffusion 3.5", classes=("SD3Transformer2DModel",), shape=shape,
    lora_loader="SD3LoraLoaderMixin",
    split_plans={"SD3Transformer2DModel": SD3_PLAN},
    presets=(FamilyPreset("sd3.5-large", SD35_LARGE, "huggingface.co/stabilityai/stable-diffusion-3.5-large "
                          "transformer/config.json (8B)",
                          parameters=ParameterCount(8_017_073_408, 212_999_680, 39_554_112)),
             FamilyPreset("sd3.5-medium", SD35_MEDIUM, "huggingface.co/stabilityai/stable-diffusion-3.5-medium "
                          "transformer/config.json (2.5B)",
                          parameters=ParameterCount(2_223_694_976, 101_506_944, 19_476_544))),
    pipeline_folders=PIPELINE_FOLDERS, pipeline_class="StableDiffusion3Pipeline", pipeline_parts=pipeline_parts,
    count_parameters=count_parameters,
    pipeline_cfg=PipelineCfg.BATCHED,  # [uncond, cond] in one transformer call: parallel.cfg=2 splits its rows
    vae_tiling=True,  # AutoencoderKL.enable_tiling: tiles of the config's sample_size (1024 for SD3.5's)
    vae_class="AutoencoderKL", vae_parallel=True,
    config_keys=CONFIG_KEYS, config_rules=config_rules,
)
