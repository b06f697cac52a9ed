"""SkyReels-V2 (diffusers ``SkyReelsV2Transformer3DModel``: neither a ``_cp_plan`` nor a table here;
its split plan is derived, runtime/models/derive.py).

Wan2.1's architecture (self-attention over the video tokens, cross-attention to umT5 text that stays
whole on every rank, Wan2.1's VAE) with diffusion forcing: the DF checkpoints give one timestep per
latent frame, so the blocks' modulation (``temb`` [B, 6, tokens, D]) and the head's shift and scale
are per token. The derived plan cuts that modulation with the tokens at every block (a timestep per
sample is left whole: the entry expects 4 dimensions) and gathers at ``norm_out``. The 1.3B DF model
adds an fps embedding (``inject_sample_info``).

Generate runs diffusers' ``SkyReelsV2Pipeline`` (text-to-video, one timestep per sample: the
modulation is left whole) as Wan's ``WanPipeline``: umT5 text, true CFG in two calls per step
(``cache_context("cond")`` then ``"uncond"``; ``parallel.cfg=2`` computes one on each cfg rank),
UniPC with flow sigmas, the Wan2.1 VAE. The image-to-video configs (SkyReelsV2ImageToVideoPipeline)
and the fps-embedding DF 1.3B (SkyReelsV2DiffusionForcingPipeline) are refused in one line.

The presets are the diffusers configs of Skywork's ``*-Diffusers`` folders on Hugging Face, as
diffusers' SkyReels-V2 conversion script writes them (``get_transformer_config``); the parameters
are counted from them on the meta device (diffusers 0.42.1).
"""

from __future__ import annotations

from typing import Any, Mapping, Optional

from . import wan
from .base import Family, FamilyPreset, ParameterCount, PipelineCfg, linear
from .config_rules import Flag, Int

_COMMON = {"patch_size": [1, 2, 2], "attention_head_dim": 128, "in_channels": 16, "out_channels": 16,
           "text_dim": 4096, "freq_dim": 256, "cross_attn_norm": True, "qk_norm": "rms_norm_across_heads",
           "eps": 1e-06, "image_dim": None, "added_kv_proj_dim": None, "inject_sample_info": False}
#: diffusion forcing 1.3B (540P): Wan2.1-1.3B's sizes and the fps embedding
DF_1_3B = {**_COMMON, "num_attention_heads": 12, "ffn_dim": 8960, "num_layers": 30, "inject_sample_info": True}
#: text-to-video 14B (540P and 720P: one architecture; the DF 14B checkpoints have this config too)
T2V_14B = {**_COMMON, "num_attention_heads": 40, "ffn_dim": 13824, "num_layers": 40}
#: image-to-video: 16 noise + 4 mask + 16 first-frame latent channels, 257 CLIP tokens 1280 wide
I2V_1_3B = {**_COMMON, "num_attention_heads": 12, "ffn_dim": 8960, "num_layers": 30, "in_channels": 36,
            "image_dim": 1280, "added_kv_proj_dim": 1536}
I2V_14B = {**T2V_14B, "in_channels": 36, "image_dim": 1280, "added_kv_proj_dim": 5120}

_HF = "huggingface.co/Skywork/{}-Diffusers transformer/config.json (diffusers' SkyReels-V2 conversion config)"
PRESETS = (
    FamilyPreset("skyreels-v2-df-1.3b-540p", DF_1_3B, _HF.format("SkyReels-V2-DF-1.3B-540P"),
                 parameters=ParameterCount(1_393_221_120, 46_440_704, 42_304_576)),
    FamilyPreset("skyreels-v2-i2v-1.3b-540p", I2V_1_3B, _HF.format("SkyReels-V2-I2V-1.3B-540P"),
                 parameters=ParameterCount(1_534_917_120, 51_163_904, 29_511_488)),
    FamilyPreset("skyreels-v2-t2v-14b-540p", T2V_14B, _HF.format("SkyReels-V2-T2V-14B-540P"),
                 parameters=ParameterCount(14_055_772_160, 351_394_304, 232_719_424)),
    FamilyPreset("skyreels-v2-t2v-14b-720p", T2V_14B, _HF.format("SkyReels-V2-T2V-14B-720P"),
                 parameters=ParameterCount(14_055_772_160, 351_394_304, 232_719_424)),
    FamilyPreset("skyreels-v2-i2v-14b-540p", I2V_14B, _HF.format("SkyReels-V2-I2V-14B-540P"),
                 parameters=ParameterCount(16_153_538_560, 403_838_464, 241_340_224)),
    FamilyPreset("skyreels-v2-i2v-14b-720p", I2V_14B, _HF.format("SkyReels-V2-I2V-14B-720P"),
                 parameters=ParameterCount(16_153_538_560, 403_838_464, 241_340_224)),
)


#: The generate workload's pipeline folder (SkyReelsV2Pipeline, the folder layout of WanPipeline's).
PIPELINE_FOLDERS = ("text_encoder", "tokenizer", "vae", "scheduler", "transformer")


def pipeline_parts(preset: Optional[str]) -> Optional[Mapping[str, Any]]:
    """The published text encoder and VAE (and the I2V image encoder) of preset ``preset``: Wan2.1's.
    diffusers' scripts/convert_skyreelsv2_to_diffusers.py, which wrote Skywork's ``*-Diffusers`` folders,
    takes the VAE from Wan-AI/Wan2.1-T2V-14B (``Wan2.1_VAE.pth`` into ``AutoencoderKLWan()``'s defaults),
    the text encoder and tokenizer from google/umt5-xxl, and for I2V the CLIP ViT-H/14
    (laion/CLIP-ViT-H-14-laion2B-s32B-b79K): wan.PARTS / wan.PARTS_I2V."""
    name = preset or ""
    if not name.startswith("skyreels-v2-"):
        return None
    return wan.PARTS_I2V if "-i2v-" in name else wan.PARTS


def generate_refusal(config: Mapping[str, Any]) -> Optional[str]:
    """What ``SkyReelsV2Pipeline`` (text-to-video) cannot run: an image-to-video config (the first
    frame as latent condition, CLIP tokens: its folders name SkyReelsV2ImageToVideoPipeline) and the
    fps embedding of DF 1.3B (``inject_sample_info``: the class needs an fps the text-to-video call
    does not pass; its folder names SkyReelsV2DiffusionForcingPipeline)."""
    c_in = int(config.get("in_channels", 16))
    if c_in > int(config.get("out_channels") or c_in) or config.get("image_dim"):
        return (f"in_channels {c_in} (image-to-video) runs in SkyReelsV2ImageToVideoPipeline, which generate does "
                "not build; SkyReelsV2Pipeline is text-to-video")
    if config.get("inject_sample_info"):
        return ("inject_sample_info (the DF 1.3B fps embedding) needs the fps SkyReelsV2DiffusionForcingPipeline "
                "passes, which generate does not build; SkyReelsV2Pipeline passes none")
    return None


def shape(config: Mapping[str, Any]) -> dict:
    return wan.shape(config)


def count_parameters(config: Mapping[str, Any]) -> ParameterCount:
    """SkyReelsV2Transformer3DModel's parameters from its config.json (diffusers 0.42.1's layers; the
    class's defaults for absent keys): Wan's blocks and root (the same layers; the attentions' RMS q/k
    norms are built even with ``qk_norm`` null), and with
    ``inject_sample_info`` the fps embedding (2 rows) and its projection to the 6-way modulation."""
    c = {**_COMMON, "num_attention_heads": 16, "ffn_dim": 8192, "num_layers": 32, **dict(config)}
    counted = wan.count_parameters({**c, "qk_norm": "rms_norm_across_heads"})  # built whatever qk_norm says
    if not c.get("inject_sample_info"):
        return counted
    h = int(c["num_attention_heads"]) * int(c["attention_head_dim"])
    fps = 2 * h + linear(h, h) + linear(h, 6 * h)
    return ParameterCount(counted.blocks, counted.largest_block, counted.root + fps)


#: SkyReelsV2Transformer3DModel's constructor arguments (diffusers 0.42.1): Wan's and two of its own
CONFIG_KEYS = {**wan.CONFIG_KEYS, "inject_sample_info": Flag(), "num_frame_per_block": Int()}


def split_refusal(config: Mapping[str, Any]) -> Optional[str]:
    """Causal frame blocks (``num_frame_per_block`` > 1, the DF pipelines' ``causal_block_size``) add
    a mask over every token pair, which the derived plan does not cut."""
    n = config.get("num_frame_per_block", 1)
    if n not in (None, 1):
        return (f"num_frame_per_block {n}: causal frame blocks mask every token pair, a mask the derived split plan "
                "does not cut")
    return None


FAMILY = Family(
    name="skyreels-v2", title="SkyReels-V2", classes=("SkyReelsV2Transformer3DModel",), shape=shape,
    derived=("SkyReelsV2Transformer3DModel",), text_split=False, video=True, presets=PRESETS,
    count_parameters=count_parameters, config_keys=CONFIG_KEYS, config_rules=wan.config_rules,
    pipeline_parts=pipeline_parts, pipeline_folders=PIPELINE_FOLDERS, pipeline_class="SkyReelsV2Pipeline",
    pipeline_cfg=PipelineCfg.TWO_CALLS,  # "cond" then "uncond" per step (as WanPipeline), one per cfg rank
    generate_refusal=generate_refusal, vae_stride_from=wan.vae_stride, vae_class="AutoencoderKLWan",
    vae_tiling=True, vae_parallel=True,  # Wan2.1's VAE: as the wan family's
    image_tokens=wan.image_tokens, split_refusal=split_refusal,
    lora_loader="SkyReelsV2LoraLoaderMixin", step_cache=(),
    step_cache_refusal="the step caches are not checked on SkyReels-V2's class yet (its split plan is derived)",
)
