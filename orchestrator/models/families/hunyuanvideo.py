"""HunyuanVideo (diffusers ``HunyuanVideoTransformer3DModel``, which has no ``_cp_plan``: sporch ships
the split plan below).

Dual-stream blocks (joint attention over [video, text]) then single-stream blocks (the two
concatenated); 3-D RoPE on the video tokens; a token refiner (``context_embedder``) that runs
self-attention over the whole prompt before the blocks, so its attention stays local. Text and
video are split as they enter the first dual-stream block, the RoPE tables as the rope module
returns them. The attention mask the model builds over [video, text] (a short prompt's padded
text tokens dropped) is cut at every block the same way, so each rank masks its own keys.
"""

from __future__ import annotations

from typing import Any, Mapping

from .base import Family, FamilyPreset, ParameterCount
from .plan_format import GatherOutput, SplitInput

#: the key mask [B, 1, 1, video + text] the forward builds from ``encoder_attention_mask``
_MASK = SplitInput(split_dim=3, expected_dims=4, segments=("hidden_states", "encoder_hidden_states"))

HUNYUAN_PLAN = {
    "rope": {0: SplitInput(split_dim=0, expected_dims=2, split_output=True),
             1: SplitInput(split_dim=0, expected_dims=2, split_output=True)},
    "transformer_blocks.0": {"hidden_states": SplitInput(split_dim=1, expected_dims=3),
                             "encoder_hidden_states": SplitInput(split_dim=1, expected_dims=3)},
    "transformer_blocks.*": {"attention_mask": _MASK},
    "single_transformer_blocks.*": {"attention_mask": _MASK},
    "proj_out": GatherOutput(gather_dim=1, expected_dims=3),
}

#: hunyuanvideo-community/HunyuanVideo transformer/config.json (Hugging Face), 13B.
HUNYUAN_VIDEO_13B = {"in_channels": 16, "out_channels": 16, "num_attention_heads": 24, "attention_head_dim": 128,
                     "num_layers": 20, "num_single_layers": 40, "num_refiner_layers": 2, "mlp_ratio": 4.0,
                     "patch_size": 2, "patch_size_t": 1, "qk_norm": "rms_norm", "guidance_embeds": True,
                     "text_embed_dim": 4096, "pooled_projection_dim": 768, "rope_theta": 256.0,
                     "rope_axes_dim": [16, 56, 56]}
TEXT_LEN = 256  # HunyuanVideoPipeline's max_sequence_length

#: The generate workload's pipeline folder (HunyuanVideoPipeline: Llama and CLIP text encoders).
PIPELINE_FOLDERS = ("text_encoder", "tokenizer", "text_encoder_2", "tokenizer_2", "vae", "scheduler", "transformer")


def shape(config: Mapping[str, Any]) -> dict:
    heads, hd = int(config.get("num_attention_heads", 24)), int(config.get("attention_head_dim", 128))
    hidden = heads * hd
    p, pt = int(config.get("patch_size", 2)), int(config.get("patch_size_t", 1))
    return {
        "attention": "joint", "depth": int(config.get("num_layers", 20)),
        "single_depth": int(config.get("num_single_layers", 40)), "hidden": hidden, "num_heads": heads,
        "num_kv_heads": heads, "head_dim": hd, "ffn_dim": int(hidden * float(config.get("mlp_ratio", 4.0))),
        "patch": [pt, p, p], "in_channels": int(config.get("in_channels", 16)), "vae_stride": [4, 8, 8],
        "text_len": TEXT_LEN, "text_dim": int(config.get("text_embed_dim", 4096)), "qk_norm": True,
    }


FAMILY = Family(
    name="hunyuanvideo", title="HunyuanVideo", classes=("HunyuanVideoTransformer3DModel",), shape=shape,
    lora_loader="HunyuanVideoLoraLoaderMixin",
    split_plans={"HunyuanVideoTransformer3DModel": HUNYUAN_PLAN}, local_attention=("context_embedder",),
    presets=(FamilyPreset("hunyuanvideo", HUNYUAN_VIDEO_13B,
                          "huggingface.co/hunyuanvideo-community/HunyuanVideo transformer/config.json (13B)",
                          parameters=ParameterCount(12_460_298_240, 339_831_296, 360_714_304)),),
    cfg=False,  # guidance-distilled: the guidance scale is an embedded input
    pipeline_folders=PIPELINE_FOLDERS, pipeline_class="HunyuanVideoPipeline", video=True,
    pipeline_cfg_batched=False,  # true CFG (true_cfg_scale): a cond and an uncond call per step
)
