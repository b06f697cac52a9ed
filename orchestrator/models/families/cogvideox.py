"""CogVideoX (diffusers ``CogVideoXTransformer3DModel``, which has no ``_cp_plan``: sporch ships the
split plan below).

The patch embedding concatenates text and video tokens and the model slices them apart again by
the text length; every block's attention joins them again ([text, video]) and rotates the video
part with the 3-D RoPE tables the pipeline passes in. So text and video are split as they enter
the first block, and the RoPE tables (one row per video token) at every block.
"""

from __future__ import annotations

from typing import Any, Mapping

from .base import Family, FamilyPreset, ParameterCount
from .plan_format import GatherOutput, SplitInput

COGVIDEOX_PLAN = {
    "transformer_blocks.0": {"hidden_states": SplitInput(split_dim=1, expected_dims=3),
                             "encoder_hidden_states": SplitInput(split_dim=1, expected_dims=3)},
    "transformer_blocks.*": {"image_rotary_emb": (SplitInput(split_dim=0, expected_dims=2),
                                                  SplitInput(split_dim=0, expected_dims=2))},
    "proj_out": GatherOutput(gather_dim=1, expected_dims=3),
}

#: The generate workload's pipeline folder (CogVideoXPipeline, text encoder T5): its sub-folders.
PIPELINE_FOLDERS = ("text_encoder", "tokenizer", "vae", "scheduler", "transformer")

#: THUDM/CogVideoX-5b transformer/config.json (Hugging Face).
COGVIDEOX_5B = {"num_attention_heads": 48, "attention_head_dim": 64, "in_channels": 16, "out_channels": 16,
                "time_embed_dim": 512, "text_embed_dim": 4096, "num_layers": 42, "sample_width": 90,
                "sample_height": 60, "sample_frames": 49, "patch_size": 2, "temporal_compression_ratio": 4,
                "max_text_seq_length": 226, "use_rotary_positional_embeddings": True}


def shape(config: Mapping[str, Any]) -> dict:
    heads, hd = int(config.get("num_attention_heads", 30)), int(config.get("attention_head_dim", 64))
    hidden = heads * hd
    p, pt = int(config.get("patch_size", 2)), int(config.get("patch_size_t") or 1)
    return {
        "attention": "joint", "depth": int(config.get("num_layers", 30)), "single_depth": 0, "hidden": hidden,
        "num_heads": heads, "num_kv_heads": heads, "head_dim": hd, "ffn_dim": 4 * hidden, "patch": [pt, p, p],
        "in_channels": int(config.get("in_channels", 16)),
        "vae_stride": [int(config.get("temporal_compression_ratio", 4)), 8, 8],
        "text_len": int(config.get("max_text_seq_length", 226)), "text_dim": int(config.get("text_embed_dim", 4096)),
        "qk_norm": True,
    }


FAMILY = Family(
    name="cogvideox", title="CogVideoX", classes=("CogVideoXTransformer3DModel",), shape=shape,
    lora_loader="CogVideoXLoraLoaderMixin",
    split_plans={"CogVideoXTransformer3DModel": COGVIDEOX_PLAN},
    presets=(FamilyPreset("cogvideox-5b", COGVIDEOX_5B, "huggingface.co/THUDM/CogVideoX-5b transformer/config.json",
                          parameters=ParameterCount(5_552_300_544, 132_197_632, 17_982_528)),),
    pipeline_folders=PIPELINE_FOLDERS, pipeline_class="CogVideoXPipeline", video=True,
    pipeline_cfg_batched=True,  # [uncond, cond] in one transformer call: parallel.cfg=2 splits it
)
