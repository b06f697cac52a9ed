"""Wan2.1 / Wan2.2 (diffusers ``WanTransformer3DModel``, which carries its own ``_cp_plan``).

sporch also runs Wan on its hand-built path (``runtime/model/wan.py``; presets, checkpoint tables and
knobs in ``contract/models/wan.py``); the generic path runs the diffusers class itself. Text stays
whole on every rank (cross-attention needs no communication).
"""

from __future__ import annotations

from typing import Any, Mapping

from .base import Family


def shape(config: Mapping[str, Any]) -> dict:
    heads, hd = int(config.get("num_attention_heads", 40)), int(config.get("attention_head_dim", 128))
    patch = [int(p) for p in config.get("patch_size", (1, 2, 2))]
    return {
        "attention": "cross", "depth": int(config.get("num_layers", 40)), "single_depth": 0,
        "hidden": heads * hd, "num_heads": heads, "num_kv_heads": heads, "head_dim": hd,
        "ffn_dim": int(config.get("ffn_dim", 13824)), "patch": patch, "in_channels": int(config.get("in_channels", 16)),
        "vae_stride": [4, 8, 8], "text_len": 512, "text_dim": int(config.get("text_dim", 4096)),
        "qk_norm": bool(config.get("qk_norm")),
    }


FAMILY = Family(name="wan", title="Wan2.1 / Wan2.2", classes=("WanTransformer3DModel",), shape=shape,
                hand_built=True)
