"""CogView4 (diffusers ``CogView4Transformer2DModel``: neither a ``_cp_plan`` nor a table here; its
split plan is derived, runtime/models/derive.py).

MMDiT-style joint attention over [text, image] inside each block (the GLM-4 text stream is updated
by every block, so the derived plan cuts it with the image), 2-D RoPE on the image tokens from the
class's own rope module. Latents: 16 channels, 8 x 8 pixels each, patch 2 x 2. Verify and benchmark
(no generate pipeline here yet).
"""

from __future__ import annotations

from typing import Any, Mapping

from .base import Family, FamilyPreset, ParameterCount, feed_forward, linear
from .rope_rules import head_width, integer

#: huggingface.co/THUDM/CogView4-6B transformer/config.json (6B): the values diffusers'
#: scripts/convert_cogview4_to_diffusers.py gives the class that wrote it (rope_axes_dim and
#: sample_size at the class's defaults, (256, 256) and 128).
COGVIEW4_6B = {"patch_size": 2, "in_channels": 16, "out_channels": 16, "num_layers": 28, "attention_head_dim": 128,
               "num_attention_heads": 32, "text_embed_dim": 4096, "time_embed_dim": 512, "condition_dim": 256,
               "pos_embed_max_size": 128, "sample_size": 128, "rope_axes_dim": [256, 256]}
#: CogView4Pipeline pads the prompt to its own length rounded up to 16 tokens, at most its
#: max_sequence_length (1024): the planner's bound (set model.text_len for shorter prompts).
TEXT_LEN = 1024


def shape(config: Mapping[str, Any]) -> dict:
    heads = integer(config, "num_attention_heads", 64)
    hd = head_width(config, "attention_head_dim", 40, multiple=4,
                    why="CogView4's RoPE rotates channel pairs over two axes of half the head each")
    hidden = heads * hd
    p = integer(config, "patch_size", 2)
    return {
        "attention": "joint", "depth": integer(config, "num_layers", 30), "single_depth": 0, "hidden": hidden,
        "num_heads": heads, "num_kv_heads": heads, "head_dim": hd, "ffn_dim": 4 * hidden, "patch": [1, p, p],
        "in_channels": integer(config, "in_channels", 16), "vae_stride": [1, 8, 8], "text_len": TEXT_LEN,
        "text_dim": integer(config, "text_embed_dim", 4096), "qk_norm": True,
    }


def count_parameters(config: Mapping[str, Any]) -> ParameterCount:
    """CogView4Transformer2DModel's parameters from its config.json (diffusers 0.42.1's layers; the
    class's defaults for absent keys): blocks (a 12-way modulation of both streams from the time
    embedding, shared q/k/v/out for text and image, one GELU FFN; q/k layer norms without weights)
    and the root (image patch and text projections, the timestep and size-condition MLPs, the output
    norm's 2-way modulation and projection)."""
    heads, hd = int(config.get("num_attention_heads", 64)), int(config.get("attention_head_dim", 40))
    h, p = heads * hd, int(config.get("patch_size", 2))
    ted, cd = int(config.get("time_embed_dim", 512)), int(config.get("condition_dim", 256))
    block = linear(ted, 12 * h) + 4 * linear(h, h) + feed_forward(h, 4 * h)
    root = (linear(int(config.get("in_channels", 16)) * p * p, h) + linear(int(config.get("text_embed_dim", 4096)), h)
            + linear(h, ted) + linear(ted, ted) + linear(6 * cd, ted) + linear(ted, ted) + linear(ted, 2 * h)
            + linear(h, p * p * int(config.get("out_channels", 16))))
    depth = int(config.get("num_layers", 30))
    return ParameterCount(blocks=depth * block, largest_block=block if depth else 0, root=root)


FAMILY = Family(
    name="cogview4", title="CogView4", classes=("CogView4Transformer2DModel",), shape=shape,
    derived=("CogView4Transformer2DModel",),
    presets=(FamilyPreset("cogview4-6b", COGVIEW4_6B, "huggingface.co/THUDM/CogView4-6B transformer/config.json (6B)",
                          parameters=ParameterCount(6_344_196_096, 226_578_432, 24_922_176)),),
    count_parameters=count_parameters,
    lora_loader=None, step_cache=(),  # LoRA and the step cache are not checked on this family yet
    step_cache_refusal="the step caches are not checked on CogView4's class yet (its split plan is derived)",
)
