"""Flux.1 (diffusers ``FluxTransformer2DModel``, which carries its own ``_cp_plan``).

sporch also runs Flux on its hand-built path (``runtime/model/mmdit.py``; presets and checkpoint
tables in ``contract/models/flux.py``); the generic path runs the diffusers class itself, text and
image tokens both split (joint attention is sequence-parallel over both).
"""

from __future__ import annotations

from typing import Any, Mapping

from .base import Family


def shape(config: Mapping[str, Any]) -> dict:
    heads, hd = int(config.get("num_attention_heads", 24)), int(config.get("attention_head_dim", 128))
    hidden = heads * hd
    return {
        "attention": "joint", "depth": int(config.get("num_layers", 19)),
        "single_depth": int(config.get("num_single_layers", 38)), "hidden": hidden, "num_heads": heads,
        "num_kv_heads": heads, "head_dim": hd, "ffn_dim": 4 * hidden, "patch": [1, 2, 2],
        "in_channels": int(config.get("in_channels", 64)) // 4, "vae_stride": [1, 8, 8], "text_len": 512,
        "text_dim": int(config.get("joint_attention_dim", 4096)), "qk_norm": True,
    }


FAMILY = Family(name="flux", title="Flux.1", classes=("FluxTransformer2DModel",), shape=shape, hand_built=True,
                cfg=False)
