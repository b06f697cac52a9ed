"""Helios (diffusers ``HeliosTransformer3DModel``): autoregressive long video, chunk by chunk.

Wan-style blocks over the chunk's tokens and, in front of them, the history's (the last frames
patched at 1x, 2x and 4x coarser: short, mid and long memory); cross-attention to the text for the
chunk's tokens only. The block splits its stream by the chunk's length, so the sequence is split
per module, as the class's own ``_cp_plan`` does: each block's self-attention (its input and RoPE
table), cross-attention and feed-forward split on entry and gathered on exit. That ``_cp_plan`` names
each of 40 blocks' gathers apart (a config of another depth would not run); sporch ships the same
plan for any depth (a split module's own output gathered, ``plan_format``).
"""

from __future__ import annotations

from typing import Any, Mapping, Optional

from .base import Family, FamilyPreset, ParameterCount, linear
from .plan_format import GatherOutput, SplitInput
from .wan_blocks import wan_block, wan_embeddings
from . import wan

_TOKENS = SplitInput(split_dim=1, expected_dims=3)
_WHOLE = GatherOutput(gather_dim=1, expected_dims=3)
HELIOS_PLAN = {
    "blocks.*.attn1": {"hidden_states": _TOKENS, "rotary_emb": _TOKENS, 0: _WHOLE},
    "blocks.*.attn2": {"hidden_states": _TOKENS, 0: _WHOLE},
    "blocks.*.ffn": {"hidden_states": _TOKENS, 0: _WHOLE},
}

TEXT_LEN = 512  # HeliosPipeline's max_sequence_length

#: BestWishYsh/Helios-Base (and -Mid, -Distilled, trained on from it): github.com/PKU-YuanGroup/Helios
#: scripts/training/configs/stage_1_init.yaml starts Helios-Base from Wan-AI/Wan2.1-T2V-14B-Diffusers'
#: transformer (its config.json: 40 heads x 128, 40 layers, FFN 13824, 16 channels, umT5 4096 wide) with
#: has_multi_term_memory_patch, zero_history_timestep and guidance_cross_attn on and is_amplify_history off,
#: the flags every later stage keeps (stage_1_post ... stage_3_post); RoPE split 44 / 42 / 42 as Wan's
HELIOS_14B = {"patch_size": [1, 2, 2], "num_attention_heads": 40, "attention_head_dim": 128, "in_channels": 16,
              "out_channels": 16, "text_dim": 4096, "freq_dim": 256, "ffn_dim": 13824, "num_layers": 40,
              "cross_attn_norm": True, "qk_norm": "rms_norm_across_heads", "eps": 1e-6, "rope_dim": [44, 42, 42],
              "guidance_cross_attn": True, "zero_history_timestep": True, "has_multi_term_memory_patch": True,
              "is_amplify_history": False}


def split_refusal(config: Mapping[str, Any]) -> Optional[str]:
    """``is_amplify_history``: the self-attention scales the history's keys by the history's length, which
    it reads from the tokens the module holds, so a rank's share would be scaled wrongly (measured 0.36 off
    on 2 ranks)."""
    if config.get("is_amplify_history", False):
        return ("is_amplify_history: its self-attention finds the history keys to scale from the length of the "
                "tokens the module holds, which a sequence rank holds a part of")
    return None


def pipeline_parts(preset: Optional[str]) -> Optional[Mapping[str, Any]]:
    """HeliosPipeline's parts are Wan2.1 T2V's (umT5-XXL, AutoencoderKLWan: Helios' docs and inference script
    load the folder's ``AutoencoderKLWan``)."""
    return wan.PARTS if preset == "helios-14b" else None


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
    """HeliosTransformer3DModel's parameters from its config.json (diffusers 0.42.1's layers: Wan2.1's blocks
    and embeddings, ``wan_blocks``, the history key scale where ``is_amplify_history``; the patch embedding
    and the short / mid / long memory patches, 1x, 2x and 4x coarser; the output table and projection)."""
    heads, hd = int(config.get("num_attention_heads", 40)), int(config.get("attention_head_dim", 128))
    h = heads * hd
    patch = 1
    for p in config.get("patch_size", (1, 2, 2)):
        patch *= int(p)
    c_in = int(config.get("in_channels", 16))
    c_out = int(config.get("out_channels", 16) or c_in)
    scale = ((heads if config.get("history_scale_mode", "per_head") == "per_head" else 1)
             if config.get("is_amplify_history", False) else 0)
    block = wan_block(config, head_scale=scale)
    memory = (c_in * patch * h + h + c_in * patch * 8 * h + h + c_in * patch * 64 * h + h
              if config.get("has_multi_term_memory_patch", True) else 0)
    root = (c_in * patch * h + h + memory + wan_embeddings({**config, "image_dim": None}) + 2 * h
            + linear(h, c_out * patch))
    depth = int(config.get("num_layers", 40))
    return ParameterCount(blocks=depth * block, largest_block=block if depth else 0, root=root)


FAMILY = Family(
    name="helios", title="Helios", classes=("HeliosTransformer3DModel",), shape=shape,
    split_plans={"HeliosTransformer3DModel": HELIOS_PLAN}, text_split=False,
    presets=(FamilyPreset("helios-14b", HELIOS_14B,
                          "github.com/PKU-YuanGroup/Helios scripts/training/configs/stage_1_init.yaml "
                          "(Wan2.1-T2V-14B's transformer with Helios' memory flags; Base, Mid and Distilled share it)",
                          parameters=ParameterCount(14_055_772_160, 351_394_304, 256_655_424)),),
    count_parameters=count_parameters, split_refusal=split_refusal, pipeline_parts=pipeline_parts,
    lora_loader="HeliosLoraLoaderMixin", step_cache=(),
    step_cache_refusal=(
        "its blocks (HeliosTransformerBlock) are not in diffusers' TransformerBlockRegistry, which the "
        "step caches read a block's outputs from"),
)
