"""Lumina-Image 2.0 (diffusers ``Lumina2Transformer2DModel``: neither a ``_cp_plan`` nor a table here;
its split plan is derived, runtime/models/derive.py).

A text refiner (self-attention over the whole prompt) and an image refiner run before the main
blocks, which take text and image joined into one sequence ([text, image], padded per row to the
longest prompt); 3-D RoPE over that joint sequence; grouped-query attention (8 key/value heads for
24 query heads). The derived plan cuts the joint sequence at the main blocks' entry, so both
refiners run whole on every rank and the text rides in the cut sequence. Latents: 16 channels, 8 x
8 pixels each, patch 2 x 2. Generate runs ``Lumina2Pipeline``, whose true CFG calls the transformer
twice per step (the prompt, then the negative prompt, in no cache context): ``parallel.cfg=2`` computes
one call on each cfg rank, told apart by their order.
"""

from __future__ import annotations

from typing import Any, Mapping, Optional

from .base import Family, FamilyPreset, ParameterCount, PipelineCfg, linear
from .rope_rules import heads_per_kv_head, integer, rope_axes

#: huggingface.co/Alpha-VLLM/Lumina-Image-2.0 transformer/config.json (2.6B; Gemma-2-2B text, 2304 wide).
LUMINA_IMAGE_2 = {"sample_size": 128, "patch_size": 2, "in_channels": 16, "out_channels": None, "hidden_size": 2304,
                  "num_layers": 26, "num_refiner_layers": 2, "num_attention_heads": 24, "num_kv_heads": 8,
                  "multiple_of": 256, "ffn_dim_multiplier": None, "norm_eps": 1e-5, "scaling_factor": 1.0,
                  "axes_dim_rope": [32, 32, 32], "axes_lens": [300, 512, 512], "cap_feat_dim": 2304}
TEXT_LEN = 256  # Lumina2Pipeline's max_sequence_length

#: The generate workload's pipeline folder (Lumina2Pipeline: Gemma-2 text encoder and its tokenizer).
PIPELINE_FOLDERS = ("text_encoder", "tokenizer", "vae", "scheduler", "transformer")

#: The published pipeline's other parts (plan/pipeline_estimate.py's memory estimate; keys as wan.PARTS),
#: huggingface.co/Alpha-VLLM/Lumina-Image-2.0: text_encoder/ Gemma2Model, Gemma-2-2B (26 layers x 2304, 8
#: heads of 256, 4 KV heads, FFN 9216, vocabulary 256000), vae/ the FLUX.1 AutoencoderKL (16 latent channels,
#: block_out_channels [128, 256, 512, 512], 2 layers per block, no quant convs, sample_size 1024: enable_tiling's
#: default tiles of 1024 x 1024 pixels). Counted with those values on the meta device (transformers 5.x,
#: diffusers 0.42.1).
PARTS: dict[str, Any] = {
    "text_encoder": "Gemma-2-2B (Gemma2Model)", "text_encoder_parameters": 2_614_341_888, "text_encoder_layers": 26,
    "text_encoder_embedding": 256_000 * 2304, "text_encoder_layer": 77_865_984,
    "vae": "AutoencoderKL (FLUX.1's, 16 channels)", "vae_parameters": 83_819_683, "vae_channels": 128,
    "vae_chunk_frames": 1, "vae_tile_pixels": 1024 * 1024}


def pipeline_parts(preset: Optional[str]) -> Optional[Mapping[str, Any]]:
    """The published Lumina-Image 2.0 pipeline's text encoder and VAE (its one preset)."""
    return PARTS if preset == "lumina-image-2.0" else None


def ffn_width(hidden: int, multiple_of: int, multiplier: Any) -> int:
    """The feed-forward width of Lumina2's blocks (4 x hidden, scaled by ``ffn_dim_multiplier``,
    rounded up to ``multiple_of``: diffusers' ``LuminaFeedForward``)."""
    inner = 4 * hidden
    if multiplier is not None:
        inner = int(float(multiplier) * inner)
    return multiple_of * ((inner + multiple_of - 1) // multiple_of)


def shape(config: Mapping[str, Any]) -> dict:
    hidden = integer(config, "hidden_size", 2304)
    heads = integer(config, "num_attention_heads", 24)
    if hidden % heads:
        raise ValueError(f"hidden_size {hidden} must be a multiple of num_attention_heads {heads}")
    hd = hidden // heads
    kv = integer(config, "num_kv_heads", 8)
    heads_per_kv_head(heads, kv, heads_key="num_attention_heads", kv_key="num_kv_heads")
    rope_axes(config, "axes_dim_rope", (32, 32, 32), hd, head_key="hidden_size / num_attention_heads")
    p = integer(config, "patch_size", 2)
    return {
        "attention": "joint", "depth": integer(config, "num_layers", 26), "single_depth": 0, "hidden": hidden,
        "num_heads": heads, "num_kv_heads": kv, "head_dim": hd,
        "ffn_dim": ffn_width(hidden, integer(config, "multiple_of", 256), config.get("ffn_dim_multiplier")),
        "patch": [1, p, p], "in_channels": integer(config, "in_channels", 16), "vae_stride": [1, 8, 8],
        "text_len": TEXT_LEN, "text_dim": integer(config, "cap_feat_dim", 1024), "qk_norm": True,
    }


def count_parameters(config: Mapping[str, Any]) -> ParameterCount:
    """Lumina2Transformer2DModel's parameters from its config.json (diffusers 0.42.1's layers; the
    class's defaults for absent keys): every block of its three block lists (the main ``layers`` and
    the image refiner modulated by the time embedding, the text refiner not; grouped-query attention
    without biases, RMS q/k norms, a gated FFN, four RMS norms) and the root (patch and caption
    embedders, the timestep MLP, the output norm's modulation and projection)."""
    hidden, heads = int(config.get("hidden_size", 2304)), int(config.get("num_attention_heads", 24))
    hd, kv = hidden // heads, int(config.get("num_kv_heads", 8))
    t = min(hidden, 1024)  # the time embedding's width
    ffn = ffn_width(hidden, int(config.get("multiple_of", 256)), config.get("ffn_dim_multiplier"))
    attention = 2 * hd + 2 * hidden * hidden + 2 * kv * hd * hidden
    plain = attention + 3 * hidden * ffn + 4 * hidden
    modulated = plain + linear(t, 4 * hidden)
    p, c_in = int(config.get("patch_size", 2)), int(config.get("in_channels", 16))
    c_out = int(config.get("out_channels") or c_in)
    cap = int(config.get("cap_feat_dim", 1024))
    root = (linear(p * p * c_in, hidden) + linear(256, t) + linear(t, t) + cap + linear(cap, hidden)
            + linear(t, hidden) + linear(hidden, p * p * c_out))
    depth, refiners = int(config.get("num_layers", 26)), int(config.get("num_refiner_layers", 2))
    return ParameterCount(blocks=(depth + refiners) * modulated + refiners * plain,
                          largest_block=modulated if depth + refiners else plain, root=root)


FAMILY = Family(
    name="lumina2", title="Lumina-Image 2.0", classes=("Lumina2Transformer2DModel",), shape=shape,
    derived=("Lumina2Transformer2DModel",),
    presets=(FamilyPreset("lumina-image-2.0", LUMINA_IMAGE_2,
                          "huggingface.co/Alpha-VLLM/Lumina-Image-2.0 transformer/config.json (2.6B)",
                          parameters=ParameterCount(2_600_484_480, 87_312_576, 9_284_672)),),
    count_parameters=count_parameters,
    pipeline_folders=PIPELINE_FOLDERS, pipeline_class="Lumina2Pipeline", pipeline_parts=pipeline_parts,
    pipeline_cfg=PipelineCfg.TWO_CALLS,  # true CFG: the prompt's then the negative prompt's call, one per cfg rank
    vae_tiling=True,  # AutoencoderKL.enable_tiling: tiles of the config's sample_size (1024 for FLUX.1's VAE)
    vae_class="AutoencoderKL", vae_parallel=True,  # FLUX.1's AutoencoderKL: row bands exact
    lora_loader=None, step_cache=(),  # LoRA and the step cache are not checked on this family yet
    step_cache_refusal="the step caches are not checked on Lumina 2's class yet (its split plan is derived)",
)
