"""Cosmos (diffusers ``CosmosTransformer3DModel``: Cosmos-1.0 Diffusion and Cosmos-Predict2; no
``_cp_plan``: sporch ships the table below).

Wan-like blocks: self-attention over the video tokens with 3-D RoPE, cross-attention to the T5-11B
prompt (1024 wide), a GELU feed-forward, each modulated by an adaptive norm with a low-rank
("adaLN-LoRA") projection of the time embedding. Cosmos-1.0 adds a learnable positional embedding
per token. Video2World checkpoints take a conditioning-mask channel with the latents and (Predict2)
one timestep per latent frame, so their modulation is per token.

The plan cuts the video tokens as they enter the first block; the RoPE tables where the rope module
returns them; the learnable positional embedding and the per-token time embeddings (a timestep per
frame: 3-D) at every block, the latter at the output norm too (a timestep per sample: 2-D, left
whole). The
prompt stays whole on every rank (cross-attention: its attention runs locally). The published
configs concatenate a padding-mask channel to the latents before the patch embedding (whole, on
every rank: needs torchvision, which diffusers resizes it with).

Latents: 16 channels, 8 x 8 pixels (Cosmos-1.0's tokenizer: 8 frames; Predict2's Wan 2.1 VAE: 4) per
latent, patch 1 x 2 x 2. Verify and benchmark (no generate pipeline here yet).
"""

from __future__ import annotations

from typing import Any, Mapping, Optional

from .base import Family, FamilyPreset, ParameterCount, linear
from .config_rules import Flag, Int, Ints, Number, Text, Unchecked
from .plan_format import GatherOutput, SplitInput
from .rope_rules import head_width, integer

#: per-token time embeddings [B, tokens, C] (a timestep per latent frame); [B, C] is left whole
_PER_TOKEN = SplitInput(split_dim=1, expected_dims=3)

COSMOS_PLAN = {
    "rope": {0: SplitInput(split_dim=0, expected_dims=2, split_output=True),
             1: SplitInput(split_dim=0, expected_dims=2, split_output=True)},
    "transformer_blocks.0": {"hidden_states": SplitInput(split_dim=1, expected_dims=3)},
    # Cosmos-1.0's learnable positional embedding [B, tokens, C] (Predict2 has none: None, left alone)
    "transformer_blocks.*": {"embedded_timestep": _PER_TOKEN, "temb": _PER_TOKEN, "extra_pos_emb": _PER_TOKEN},
    "norm_out": {"embedded_timestep": _PER_TOKEN, "temb": _PER_TOKEN},
    "proj_out": GatherOutput(gather_dim=1, expected_dims=3),
}

_COMMON = {"out_channels": 16, "attention_head_dim": 128, "mlp_ratio": 4.0, "text_embed_dim": 1024,
           "adaln_lora_dim": 256, "max_size": [128, 240, 240], "patch_size": [1, 2, 2], "concat_padding_mask": True}


def _config(in_channels: int, heads: int, layers: int, rope_scale: list, pos_embed: Optional[str]) -> dict:
    return {**_COMMON, "in_channels": in_channels, "num_attention_heads": heads, "num_layers": layers,
            "rope_scale": rope_scale, "extra_pos_embed_type": pos_embed}


#: The published transformer/config.json of each (Hugging Face repository named in its preset's source):
#: the values diffusers' scripts/convert_cosmos_to_diffusers.py writes for it (TRANSFORMER_CONFIGS).
COSMOS_1_7B_T2W = _config(16, 32, 28, [2.0, 1.0, 1.0], "learnable")
COSMOS_1_7B_V2W = _config(17, 32, 28, [2.0, 1.0, 1.0], "learnable")
COSMOS_1_14B_T2W = _config(16, 40, 36, [2.0, 2.0, 2.0], "learnable")
COSMOS_1_14B_V2W = _config(17, 40, 36, [2.0, 2.0, 2.0], "learnable")
PREDICT2_2B_T2I = _config(16, 16, 28, [1.0, 4.0, 4.0], None)
PREDICT2_14B_T2I = _config(16, 40, 36, [1.0, 4.0, 4.0], None)
PREDICT2_2B_V2W = _config(17, 16, 28, [1.0, 3.0, 3.0], None)
PREDICT2_14B_V2W = _config(17, 40, 36, [20 / 24, 2.0, 2.0], None)
#: The Cosmos pipelines' max_sequence_length (T5-11B)
TEXT_LEN = 512


def shape(config: Mapping[str, Any]) -> dict:
    heads = integer(config, "num_attention_heads", 32)
    hd = head_width(config, "attention_head_dim", 128)
    hidden = heads * hd
    pt, ph, pw = (int(x) for x in config.get("patch_size", (1, 2, 2)))
    out = integer(config, "out_channels", 16)
    return {
        "attention": "cross", "depth": integer(config, "num_layers", 28), "single_depth": 0, "hidden": hidden,
        "num_heads": heads, "num_kv_heads": heads, "head_dim": hd,
        "ffn_dim": int(hidden * float(config.get("mlp_ratio", 4.0))), "patch": [pt, ph, pw],
        # Cosmos-1.0 (its learnable positional embedding) decodes with the CV8x8x8 tokenizer, Predict2 with
        # Wan 2.1's VAE (4 frames per latent)
        "in_channels": out, "vae_stride": [8 if config.get("extra_pos_embed_type") else 4, 8, 8],
        "text_len": TEXT_LEN, "text_dim": integer(config, "text_embed_dim", 1024), "qk_norm": True,
    }


def count_parameters(config: Mapping[str, Any]) -> ParameterCount:
    """CosmosTransformer3DModel's parameters from its config.json (diffusers 0.42.1's layers; the
    class's defaults for absent keys): blocks (three adaLN-LoRA norms, self- and cross-attention
    without biases with RMS q/k norms per head, the image-context projections where configured, a
    GELU FFN without biases) and the root (patch embedding, learnable positional embedding, time
    embedding, output norm and projection, the text and image-context projections where configured)."""
    heads, hd = int(config.get("num_attention_heads", 32)), int(config.get("attention_head_dim", 128))
    h = heads * hd
    lora, text = int(config.get("adaln_lora_dim", 256)), int(config.get("text_embed_dim", 1024))
    pt, ph, pw = (int(x) for x in config.get("patch_size", (1, 2, 2)))
    c_in = int(config.get("in_channels", 16)) + (1 if config.get("concat_padding_mask", True) else 0)
    img = config.get("img_context_dim_in")
    inner = int(h * float(config.get("mlp_ratio", 4.0)))
    block = (3 * (h * lora + lora * 3 * h) + 4 * h * h + 2 * hd + 2 * h * h + 2 * text * h + 2 * hd
             + (3 * h * h + 2 * hd if img else 0) + 2 * h * inner)
    mt, mh, mw = (int(x) for x in config.get("max_size", (128, 240, 240)))
    pos = (mt // pt + mh // ph + mw // pw) * h if config.get("extra_pos_embed_type", "learnable") == "learnable" else 0
    root = (c_in * pt * ph * pw * h + pos + h * h + h * 3 * h + h + h * lora + lora * 2 * h
            + h * pt * ph * pw * int(config.get("out_channels", 16)))
    if config.get("use_crossattn_projection"):
        root += linear(int(config.get("crossattn_proj_in_channels", 1024)),
                       int(config.get("encoder_hidden_states_channels", 1024)))
    if img:
        root += linear(int(img), int(config.get("img_context_dim_out", 2048)))
    depth = int(config.get("num_layers", 28))
    return ParameterCount(blocks=depth * block, largest_block=block if depth else 0, root=root)


def split_refusal(config: Mapping[str, Any]) -> Optional[str]:
    """Cosmos-Transfer's control residuals (added to every n-th block's tokens) are not cut by the plan."""
    if config.get("controlnet_block_every_n"):
        return (f"controlnet_block_every_n {config['controlnet_block_every_n']}: the control residuals "
                "Cosmos-Transfer adds to the blocks are not cut by sporch's split plan")
    return None


def config_rules(config: Mapping[str, Any]):
    hd = int(config.get("attention_head_dim", 128))
    if hd // 6 * 2 <= 2:
        return "attention_head_dim", f"{hd} must be at least 12 (Cosmos' RoPE gives height and width a third each)"
    return None


#: CosmosTransformer3DModel's constructor arguments (diffusers 0.42.1) and their values.
CONFIG_KEYS = {
    "in_channels": Int(), "out_channels": Int(), "num_attention_heads": Int(), "attention_head_dim": Int(),
    "num_layers": Int(0), "mlp_ratio": Number(0, open_min=True), "text_embed_dim": Int(), "adaln_lora_dim": Int(),
    "max_size": Ints(length=3), "patch_size": Ints(length=3), "rope_scale": Unchecked(),
    "concat_padding_mask": Flag(), "extra_pos_embed_type": Text("learnable", None),
    "use_crossattn_projection": Flag(), "crossattn_proj_in_channels": Int(), "encoder_hidden_states_channels": Int(),
    "controlnet_block_every_n": Int(optional=True), "img_context_dim_in": Int(optional=True),
    "img_context_num_tokens": Int(), "img_context_dim_out": Int(),
}


def _preset(name: str, repo: str, config: dict, parameters: ParameterCount) -> FamilyPreset:
    return FamilyPreset(name, config, f"huggingface.co/nvidia/{repo} transformer/config.json", parameters=parameters)


FAMILY = Family(
    name="cosmos", title="Cosmos", classes=("CosmosTransformer3DModel",), shape=shape, video=True,
    split_plans={"CosmosTransformer3DModel": COSMOS_PLAN}, text_split=False,
    presets=(
        _preset("cosmos-1.0-7b-text2world", "Cosmos-1.0-Diffusion-7B-Text2World", COSMOS_1_7B_T2W,
                ParameterCount(7_163_885_568, 255_853_056, 72_306_688)),
        _preset("cosmos-1.0-7b-video2world", "Cosmos-1.0-Diffusion-7B-Video2World", COSMOS_1_7B_V2W,
                ParameterCount(7_163_885_568, 255_853_056, 72_323_072)),
        _preset("cosmos-1.0-14b-text2world", "Cosmos-1.0-Diffusion-14B-Text2World", COSMOS_1_14B_T2W,
                ParameterCount(14_155_794_432, 393_216_512, 111_354_880)),
        _preset("cosmos-1.0-14b-video2world", "Cosmos-1.0-Diffusion-14B-Video2World", COSMOS_1_14B_V2W,
                ParameterCount(14_155_794_432, 393_216_512, 111_375_360)),
        _preset("cosmos-predict2-2b-text2image", "Cosmos-Predict2-2B-Text2Image", PREDICT2_2B_T2I,
                ParameterCount(1_937_782_784, 69_206_528, 18_622_464)),
        _preset("cosmos-predict2-14b-text2image", "Cosmos-Predict2-14B-Text2Image", PREDICT2_14B_T2I,
                ParameterCount(14_155_794_432, 393_216_512, 109_470_720)),
        _preset("cosmos-predict2-2b-video2world", "Cosmos-Predict2-2B-Video2World", PREDICT2_2B_V2W,
                ParameterCount(1_937_782_784, 69_206_528, 18_630_656)),
        _preset("cosmos-predict2-14b-video2world", "Cosmos-Predict2-14B-Video2World", PREDICT2_14B_V2W,
                ParameterCount(14_155_794_432, 393_216_512, 109_491_200)),
    ),
    count_parameters=count_parameters, config_keys=CONFIG_KEYS, config_rules=config_rules,
    split_refusal=split_refusal,
    lora_loader="CosmosLoraLoaderMixin",
    step_cache=(), step_cache_refusal="the step caches are not checked on Cosmos' class yet",
)
