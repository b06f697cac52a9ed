"""Chroma (diffusers ``ChromaTransformer2DModel``: neither a ``_cp_plan`` nor a table here; its split
plan is derived, runtime/models/derive.py).

Flux.1's layout without its guidance and pooled-text inputs: dual-stream blocks (joint attention
over [text, image]) then single-stream blocks on the two joined, one RoPE table over [text, image]
(the derived plan cuts it as the two streams' segments), modulation from a distilled
approximator. Packed latents: 16 channels, 2 x 2 latent pixels per token (64 inputs), 8 x 8 pixels
per latent. Verify and benchmark; no generate (``Family.pipeline_refusal``): ChromaPipeline hands every
block a float mask over [text, image] x [text, image], its token mask's outer product, which SDPA adds
to the scores (+1 between two kept tokens, 0 elsewhere: a bias that differs between queries, not a
dropped key), and sequence-parallel attention takes masks that drop keys alike for every query only.
"""

from __future__ import annotations

from typing import Any, Mapping

from .base import Family, FamilyPreset, ParameterCount, feed_forward, linear
from .rope_rules import head_width, integer, rope_axes

#: huggingface.co/lodestones/Chroma1-HD transformer/config.json (8.9B).
CHROMA1_HD = {"patch_size": 1, "in_channels": 64, "out_channels": None, "num_layers": 19, "num_single_layers": 38,
              "attention_head_dim": 128, "num_attention_heads": 24, "joint_attention_dim": 4096,
              "axes_dims_rope": [16, 56, 56], "approximator_num_channels": 64, "approximator_hidden_dim": 5120,
              "approximator_layers": 5}
TEXT_LEN = 512  # ChromaPipeline's max_sequence_length (T5-XXL)


def shape(config: Mapping[str, Any]) -> dict:
    heads = integer(config, "num_attention_heads", 24)
    hd = head_width(config, "attention_head_dim", 128)
    rope_axes(config, "axes_dims_rope", (16, 56, 56), hd, head_key="attention_head_dim")
    packed = integer(config, "in_channels", 64)
    if packed % 4:
        raise ValueError(f"in_channels {packed} must be a multiple of 4 (2 x 2 latent pixels packed per token)")
    if integer(config, "patch_size", 1) != 1:
        raise ValueError(f"patch_size {config.get('patch_size')} must be 1 (the latents come packed 2 x 2)")
    hidden = heads * hd
    return {
        "attention": "joint", "depth": integer(config, "num_layers", 19),
        "single_depth": int(config.get("num_single_layers", 38)), "hidden": hidden, "num_heads": heads,
        "num_kv_heads": heads, "head_dim": hd, "ffn_dim": 4 * hidden, "patch": [1, 2, 2], "in_channels": packed // 4,
        "vae_stride": [1, 8, 8], "text_len": TEXT_LEN, "text_dim": integer(config, "joint_attention_dim", 4096),
        "qk_norm": True,
    }


def count_parameters(config: Mapping[str, Any]) -> ParameterCount:
    """ChromaTransformer2DModel's parameters from its config.json (diffusers 0.42.1's layers; the
    class's defaults for absent keys): dual-stream blocks (joint q/k/v/out and the text's, RMS q/k
    norms, both GELU FFNs; their modulation comes from the root's approximator, no weights of its
    own), single-stream blocks (q/k/v, the FFN's input, one output projection over [attention, FFN])
    and the root (the distilled-guidance approximator, text and image input projections, output
    projection)."""
    heads, hd = int(config.get("num_attention_heads", 24)), int(config.get("attention_head_dim", 128))
    h = heads * hd
    dual = 4 * hd + 8 * linear(h, h) + 2 * feed_forward(h, 4 * h)
    single = 2 * hd + 3 * linear(h, h) + linear(h, 4 * h) + linear(5 * h, h)
    a_in, a_hidden = int(config.get("approximator_num_channels", 64)), int(config.get("approximator_hidden_dim", 5120))
    approximator = (linear(a_in, a_hidden) + int(config.get("approximator_layers", 5)) * (2 * linear(a_hidden, a_hidden)
                    + a_hidden) + linear(a_hidden, h))
    c_in, p = int(config.get("in_channels", 64)), int(config.get("patch_size", 1))
    root = (approximator + linear(int(config.get("joint_attention_dim", 4096)), h) + linear(c_in, h)
            + linear(h, p * p * int(config.get("out_channels") or c_in)))
    depth, single_depth = int(config.get("num_layers", 19)), int(config.get("num_single_layers", 38))
    largest = max(dual if depth else 0, single if single_depth else 0)
    return ParameterCount(blocks=depth * dual + single_depth * single, largest_block=largest, root=root)


FAMILY = Family(
    name="chroma", title="Chroma", classes=("ChromaTransformer2DModel",), shape=shape,
    derived=("ChromaTransformer2DModel",),
    presets=(FamilyPreset("chroma1-hd", CHROMA1_HD, "huggingface.co/lodestones/Chroma1-HD transformer/config.json (8.9B)",
                          parameters=ParameterCount(8_608_715_776, 226_548_224, 291_267_648)),),
    count_parameters=count_parameters,
    pipeline_refusal=("ChromaPipeline's attention mask is its token mask's outer product in float, added to the "
                      "scores per query and key, which sequence-parallel attention does not take: it drops keys "
                      "alike for every query only"),
    lora_loader=None, step_cache=(),  # LoRA and the step cache are not checked on this family yet
    step_cache_refusal="the step caches are not checked on Chroma's class yet (its split plan is derived)",
)
