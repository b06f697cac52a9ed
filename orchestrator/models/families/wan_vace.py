"""Wan2.1 VACE (diffusers ``WanVACETransformer3DModel``: unlike ``WanTransformer3DModel`` it has no
``_cp_plan``; sporch ships the table below).

Wan2.1's text-to-video blocks plus a control branch: VACE blocks (Wan blocks with an output
projection; the first adds the video tokens to the control tokens first) run on the control
latents (the reference video and its mask patch-embedded, zero-padded to the video's token count)
before the main blocks, and each one's hint is added to the video tokens after the main block of
its ``vace_layers`` index. Every hint is made and added token by token, so the plan cuts the video
and the control tokens as they enter the first VACE block, the video again as it enters the first
main block (the forward hands the blocks the whole tensor again), the RoPE tables where the rope
module returns them, and gathers the output projection; the umT5 prompt stays whole on every rank
(cross-attention, local).

Latents: 16 channels, 4 frames x 8 x 8 pixels each (Wan 2.1's VAE), patch 1 x 2 x 2; control
latents: 96 channels. Verify and benchmark (no generate pipeline here yet).
"""

from __future__ import annotations

from typing import Any, Mapping, Optional

from . import wan
from .base import Family, FamilyPreset, ParameterCount, linear
from .config_rules import Int, Ints
from .plan_format import GatherOutput, SplitInput

WAN_VACE_PLAN = {
    "rope": {0: SplitInput(split_dim=1, expected_dims=4, split_output=True),
             1: SplitInput(split_dim=1, expected_dims=4, split_output=True)},
    "vace_blocks.0": {"hidden_states": SplitInput(split_dim=1, expected_dims=3),
                      "control_hidden_states": SplitInput(split_dim=1, expected_dims=3)},
    "blocks.0": {"hidden_states": SplitInput(split_dim=1, expected_dims=3)},
    "proj_out": GatherOutput(gather_dim=1, expected_dims=3),
}

_COMMON = {"patch_size": [1, 2, 2], "attention_head_dim": 128, "in_channels": 16, "out_channels": 16,
           "text_dim": 4096, "freq_dim": 256, "cross_attn_norm": True, "qk_norm": "rms_norm_across_heads",
           "eps": 1e-6, "image_dim": None, "added_kv_proj_dim": None, "rope_max_seq_len": 1024,
           "pos_embed_seq_len": None, "vace_in_channels": 96}
#: huggingface.co/Wan-AI/Wan2.1-VACE-1.3B-diffusers transformer/config.json (the values diffusers'
#: scripts/convert_wan_to_diffusers.py writes for Wan-VACE-1.3B)
VACE_1_3B = {**_COMMON, "num_attention_heads": 12, "ffn_dim": 8960, "num_layers": 30,
             "vace_layers": list(range(0, 30, 2))}
#: huggingface.co/Wan-AI/Wan2.1-VACE-14B-diffusers transformer/config.json (Wan-VACE-14B)
VACE_14B = {**_COMMON, "num_attention_heads": 40, "ffn_dim": 13824, "num_layers": 40,
            "vace_layers": list(range(0, 40, 5))}


def shape(config: Mapping[str, Any]) -> dict:
    """Wan's shape, its depth counting the VACE blocks too (each one a Wan block's work per step)."""
    out = wan.shape(config)
    out["depth"] += len(config.get("vace_layers", [0, 5, 10, 15, 20, 25, 30, 35]))
    return out


def count_parameters(config: Mapping[str, Any]) -> ParameterCount:
    """WanVACETransformer3DModel's parameters from its config.json (diffusers 0.42.1's layers; the
    class's defaults for absent keys): Wan's blocks and root (``wan.count_parameters``), the VACE
    blocks (a Wan block with an output projection, the first with an input projection too) and the
    control patch embedding."""
    c = {"num_attention_heads": 40, "ffn_dim": 13824, "num_layers": 40, "vace_layers": [0, 5, 10, 15, 20, 25, 30, 35],
         "vace_in_channels": 96, **dict(config)}
    # diffusers 0.42.1's WanAttention has its q/k RMS norms whatever ``qk_norm`` says
    base = wan.count_parameters({**{k: v for k, v in c.items() if k not in ("vace_layers", "vace_in_channels")},
                                 "qk_norm": "rms_norm_across_heads"})
    h = int(c["num_attention_heads"]) * int(c.get("attention_head_dim", 128))
    block = base.largest_block
    vace = len(c["vace_layers"]) * (block + linear(h, h)) + (linear(h, h) if c["vace_layers"] else 0)
    pt, ph, pw = (int(p) for p in c.get("patch_size", (1, 2, 2)))
    root = base.root + int(c["vace_in_channels"]) * pt * ph * pw * h + h
    largest = max(block, block + 2 * linear(h, h) if c["vace_layers"] else 0)
    return ParameterCount(blocks=base.blocks + vace, largest_block=largest, root=root)


def config_rules(config: Mapping[str, Any]) -> Optional[tuple[str, str]]:
    """Wan's rules, and VACE layers that are main blocks, the first of them 0 (the class's own checks)."""
    problem = wan.config_rules(config)
    if problem is not None:
        return problem
    layers, depth = config.get("vace_layers", [0, 5, 10, 15, 20, 25, 30, 35]), int(config.get("num_layers", 40))
    if not layers or 0 not in layers or max(layers) >= depth:
        return "vace_layers", f"{list(layers)} must include 0 and name main blocks (num_layers {depth})"
    return None


def split_refusal(config: Mapping[str, Any]) -> Optional[str]:
    """The plan keeps image tokens whole with the text; VACE's published configs have none."""
    if config.get("image_dim"):
        return "image_dim: CLIP image tokens in a VACE model are not checked with sporch's split plan"
    return None


#: WanVACETransformer3DModel's constructor arguments (diffusers 0.42.1): Wan's and the control branch's.
CONFIG_KEYS = {**wan.CONFIG_KEYS, "vace_layers": Ints(minimum=0), "vace_in_channels": Int()}

FAMILY = Family(
    name="wan-vace", title="Wan2.1 VACE", classes=("WanVACETransformer3DModel",), shape=shape, video=True,
    split_plans={"WanVACETransformer3DModel": WAN_VACE_PLAN}, text_split=False,
    presets=(FamilyPreset("wan2.1-vace-1.3b", VACE_1_3B,
                          "huggingface.co/Wan-AI/Wan2.1-VACE-1.3B-diffusers transformer/config.json (1.3B)",
                          parameters=ParameterCount(2_127_604_992, 51_162_368, 26_367_040)),
             FamilyPreset("wan2.1-vace-14b", VACE_14B,
                          "huggingface.co/Wan-AI/Wan2.1-VACE-14B-diffusers transformer/config.json (14B)",
                          parameters=ParameterCount(17_102_902_272, 403_833_344, 234_690_624))),
    count_parameters=count_parameters, config_keys=CONFIG_KEYS, config_rules=config_rules,
    split_refusal=split_refusal,
    lora_loader="WanLoraLoaderMixin",  # WanVACEPipeline's loader
    step_cache=(), step_cache_refusal="the step caches are not checked on Wan VACE's class yet",
)
