"""MiniMax-H3 (diffusers ``MiniMaxH3Transformer3DModel``, which carries its own ``_cp_plan``): video and
its soundtrack from one transformer over one packed sequence.

The text (after a token refiner that runs on the whole prompt), the audio rows and the video rows
are packed into one sequence; every block is full self-attention over it, modulated per row by its
(timestep, modality). The ``_cp_plan`` splits the packed sequence at the first block, with its per-row
tables (RoPE, modulation indices), and gathers both output heads, so text, audio and video are all
sequence-parallel. The attention is wider than the residual stream (56 heads x 128 = 7168 over 5376).
"""

from __future__ import annotations

from typing import Any, Mapping

from .base import Family, FamilyPreset, ParameterCount, linear

#: MiniMaxAI/MiniMax-H3's transformer (``transformer/``; ``transformer_ref/``, the reference-conditioned
#: partition, has the same size): diffusers' scripts/convert_minimax_h3_to_diffusers.py
#: MINIMAX_H3_TRANSFORMER_CONFIG, the config.json it writes
MINIMAX_H3 = {"num_attention_heads": 56, "attention_head_dim": 128, "hidden_size": 5376, "num_layers": 50,
              "num_refiner_layers": 2, "ffn_dim": 14336, "in_channels": 24, "audio_in_channels": 32,
              "patch_size": [1, 2, 2], "text_dim": 5120, "freq_dim": 256, "time_embed_hidden_dim": 5376,
              "time_embed_dim": 2688, "rope_freq_dim": 16, "rope_theta": 10000.0, "norm_eps": 1e-5,
              "qk_norm_eps": 1e-5, "final_norm_eps": 1e-5}


def shape(config: Mapping[str, Any]) -> dict:
    heads, hd = int(config.get("num_attention_heads", 56)), int(config.get("attention_head_dim", 128))
    patch = [int(p) for p in config.get("patch_size", (1, 2, 2))]
    return {
        "attention": "joint", "depth": int(config.get("num_layers", 50)), "single_depth": 0,
        "hidden": int(config.get("hidden_size", 5376)), "num_heads": heads, "num_kv_heads": heads, "head_dim": hd,
        "ffn_dim": int(config.get("ffn_dim", 14336)), "patch": patch, "in_channels": int(config.get("in_channels", 24)),
        "vae_stride": [4, 16, 16], "text_len": 512, "text_dim": int(config.get("text_dim", 5120)), "qk_norm": True,
    }


def _layer(hidden: int, inner: int, hd: int, ffn: int) -> int:
    """A pre-norm layer of MiniMax-H3 (a block or a refiner block): two RMS norms, unbiased q/k/v/out
    (``inner`` = heads x head width), per-head RMS q/k norms, an unbiased SwiGLU feed-forward."""
    return 2 * hidden + 3 * linear(hidden, inner, False) + 2 * hd + linear(inner, hidden, False) \
        + linear(hidden, 2 * ffn, False) + linear(ffn, hidden, False)


def count_parameters(config: Mapping[str, Any]) -> ParameterCount:
    """MiniMaxH3Transformer3DModel's parameters from its config.json (diffusers 0.42.1's layers; the class's
    defaults for absent keys): blocks (a layer and its (timestep, modality) modulation projection) and the
    root (the three input projections, the timestep MLP, the token refiner and its final norm, the output
    norm's modulation, the video and audio heads)."""
    heads, hd = int(config.get("num_attention_heads", 56)), int(config.get("attention_head_dim", 128))
    hs, ffn = int(config.get("hidden_size", 5376)), int(config.get("ffn_dim", 14336))
    ted, teh = int(config.get("time_embed_dim", 2688)), int(config.get("time_embed_hidden_dim", 5376))
    patch = int(config.get("in_channels", 24))
    for p in config.get("patch_size", (1, 2, 2)):
        patch *= int(p)
    audio = int(config.get("audio_in_channels", 32))
    layer = _layer(hs, heads * hd, hd, ffn)
    block = layer + linear(ted, 18 * hs)
    root = (linear(patch, hs) + linear(audio, hs) + linear(int(config.get("text_dim", 5120)), hs)
            + linear(int(config.get("freq_dim", 256)), teh) + linear(teh, ted)
            + int(config.get("num_refiner_layers", 2)) * layer + hs
            + hs + linear(ted, 2 * hs) + linear(hs, patch) + linear(hs, audio))
    depth = int(config.get("num_layers", 50))
    return ParameterCount(blocks=depth * block, largest_block=block if depth else 0, root=root)


FAMILY = Family(
    name="minimax-h3", title="MiniMax-H3", classes=("MiniMaxH3Transformer3DModel",), shape=shape,
    local_attention=("token_refiner",), text_split=False,
    presets=(FamilyPreset("minimax-h3", MINIMAX_H3,
                          "github.com/huggingface/diffusers scripts/convert_minimax_h3_to_diffusers.py "
                          "MINIMAX_H3_TRANSFORMER_CONFIG (MiniMaxAI/MiniMax-H3 transformer/)",
                          parameters=ParameterCount(32_278_592_000, 645_571_840, 844_400_896)),),
    count_parameters=count_parameters, lora_loader="MiniMaxH3LoraLoaderMixin", step_cache=(),
    step_cache_refusal=(
        "its blocks (MiniMaxH3TransformerBlock) are not in diffusers' TransformerBlockRegistry, which the"
        " step caches read a block's outputs from"),
    cfg=False,  # guidance-distilled: one pass per step, no negative prompt
)
