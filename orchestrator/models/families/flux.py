"""Flux.1 (diffusers ``FluxTransformer2DModel``, which carries its own ``_cp_plan``).

MMDiT: double-stream blocks (separate image and text weights, one joint attention) then
single-stream blocks; the text and image tokens are both split (joint attention is
sequence-parallel over both). Both published models are guidance-distilled: one transformer pass
per step, no classifier-free-guidance branch (``parallel.cfg`` is 1); dev takes
``workload.guidance_scale`` as an embedded input (``guidance_embeds``), schnell (timestep-distilled)
has none. The generate workload runs ``FluxPipeline``.
"""

from __future__ import annotations

from typing import Any, Mapping, Optional

from sporch.orchestrator.models.families.base import (T5_XXL_LAYER, Family, FamilyPreset, ParameterCount,
                                                      feed_forward, linear)
from sporch.orchestrator.models.families.config_rules import Flag, Int, Ints, head_dim_problem, rope_axes_problem

#: The generate workload's pipeline folder (FluxPipeline): the sub-folders it reads.
PIPELINE_FOLDERS = ("text_encoder", "tokenizer", "text_encoder_2", "tokenizer_2", "vae", "scheduler", "transformer")

#: black-forest-labs/FLUX.1-dev transformer/config.json (schnell's differs in guidance_embeds only)
DEV = {"patch_size": 1, "in_channels": 64, "out_channels": None, "num_layers": 19, "num_single_layers": 38,
       "attention_head_dim": 128, "num_attention_heads": 24, "joint_attention_dim": 4096,
       "pooled_projection_dim": 768, "guidance_embeds": True, "axes_dims_rope": [16, 56, 56]}
SCHNELL = {**DEV, "guidance_embeds": False}
#: The joint-attention test model (a tiny FluxTransformer2DModel config, random weights).
TINY = {**DEV, "in_channels": 16, "num_layers": 1, "num_single_layers": 1, "attention_head_dim": 16,
        "num_attention_heads": 4, "joint_attention_dim": 32, "pooled_projection_dim": 16, "axes_dims_rope": [4, 6, 6]}

PRESETS = (
    FamilyPreset("flux.1-dev", DEV, "huggingface.co/black-forest-labs/FLUX.1-dev transformer/config.json",
                 parameters=ParameterCount(11_837_283_328, 339_831_296, 64_124_992)),
    # the release's T5 length: FluxPipeline's max_sequence_length 256 for schnell (BFL's reference: 256)
    FamilyPreset("flux.1-schnell", SCHNELL, "huggingface.co/black-forest-labs/FLUX.1-schnell transformer/config.json",
                 parameters=ParameterCount(11_837_283_328, 339_831_296, 53_895_232), shape_overrides={"text_len": 256}),
    FamilyPreset("tiny-flux", TINY, "sporch's joint-attention test model (a tiny FluxTransformer2DModel config)",
                 shape_overrides={"text_len": 8}, test_model=True),
)

#: Parameters of Flux.1's other parts (plan/pipeline_estimate.py's memory estimate; the keys as wan.PARTS):
#: T5-XXL and CLIP-L text encoders, the 16-channel AutoencoderKL.
PARTS: dict[str, Any] = {
    "text_encoder": "T5-XXL encoder + CLIP-L text", "text_encoder_parameters": 4_760_000_000 + 123_000_000,
    "text_encoder_layers": 24 + 12, "text_encoder_embedding": 32_128 * 4096,
    "text_encoder_layer": T5_XXL_LAYER,  # a T5 layer: what a sharded encoder gathers with the next one
    "vae": "AutoencoderKL", "vae_parameters": 84_000_000, "vae_channels": 128, "vae_chunk_frames": 1,
    "vae_tile_pixels": 1024 * 1024}


def pipeline_parts(preset: Optional[str]) -> Optional[Mapping[str, Any]]:
    """Flux.1's text encoders and VAE for a Flux.1 preset; None otherwise."""
    return PARTS if (preset or "").startswith("flux.1") else None


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


def count_parameters(config: Mapping[str, Any]) -> ParameterCount:
    """FluxTransformer2DModel's parameters from its config.json (diffusers 0.42.1's layers; the class's
    defaults for absent keys): double-stream blocks (each stream's 6-way modulation, q/k/v/out
    projections with per-head RMS q/k norms, a 4x feed-forward), single-stream blocks (3-way
    modulation, q/k/v, the MLP input and the fused output projection) and the root (time, guidance
    and pooled-text embedders, the text and latent input projections, the output norm's modulation
    and projection)."""
    c = {**DEV, "guidance_embeds": False, **dict(config)}
    hd = int(c["attention_head_dim"])
    h = int(c["num_attention_heads"]) * hd
    double = 2 * linear(h, 6 * h) + 8 * linear(h, h) + 4 * hd + 2 * feed_forward(h, 4 * h)
    single = linear(h, 3 * h) + linear(h, 4 * h) + linear(5 * h, h) + 3 * linear(h, h) + 2 * hd
    timestep = linear(256, h) + linear(h, h)
    c_in = int(c["in_channels"])
    c_out = int(c.get("out_channels") or c_in)
    root = (timestep * (2 if c.get("guidance_embeds") else 1) + linear(int(c["pooled_projection_dim"]), h)
            + linear(h, h) + linear(int(c["joint_attention_dim"]), h) + linear(c_in, h) + linear(h, 2 * h)
            + linear(h, int(c["patch_size"]) ** 2 * c_out))
    depth, singles = int(c["num_layers"]), int(c["num_single_layers"])
    largest = max(double if depth else 0, single if singles else 0)
    return ParameterCount(blocks=depth * double + singles * single, largest_block=largest, root=root)


def rope_axes(head_dim: int) -> list[int]:
    """A RoPE split of ``head_dim`` over (index, row, column) as Flux.1's (16, 56, 56) of 128: the
    row and column axes alike and even, the rest to the index axis."""
    side = 2 * ((head_dim - head_dim // 8) // 4)
    return [head_dim - 2 * side, side, side]


def config_for(base: Mapping[str, Any], model: Mapping[str, Any]) -> dict:
    """A FluxTransformer2DModel config with ``model``'s shape on top of ``base`` (a preset's config,
    or {}: FLUX.1-dev's). The class fixes the feed-forward width (4 x hidden) and the 2 x 2 packing;
    a shape it cannot express is caught by comparing :func:`shape` of the result with ``model``."""
    out = {**DEV, **dict(base)}
    hd = int(model["head_dim"])
    axes = out.get("axes_dims_rope")
    out.update(num_layers=int(model["depth"]), num_single_layers=int(model["single_depth"]),
               num_attention_heads=int(model["num_heads"]), attention_head_dim=hd,
               in_channels=4 * int(model["in_channels"]), joint_attention_dim=int(model["text_dim"]),
               axes_dims_rope=list(axes) if axes and sum(axes) == hd else rope_axes(hd))
    return out


#: FluxTransformer2DModel's constructor arguments (diffusers 0.42.1) and their values.
CONFIG_KEYS = {
    "patch_size": Int(), "in_channels": Int(4), "out_channels": Int(4, optional=True), "num_layers": Int(0),
    "num_single_layers": Int(0), "attention_head_dim": Int(2), "num_attention_heads": Int(),
    "joint_attention_dim": Int(), "pooled_projection_dim": Int(), "guidance_embeds": Flag(),
    "axes_dims_rope": Ints(3, minimum=0)}


def config_rules(config: Mapping[str, Any]) -> Optional[tuple[str, str]]:
    """Flux packs 2 x 2 latent patches itself (patch_size 1, channels a multiple of 4) and splits
    the head width over three even RoPE axes."""
    if config.get("patch_size", 1) != 1:
        return "patch_size", f"{config['patch_size']!r} must be 1 (the pipeline packs 2 x 2 latent patches itself)"
    for key in ("in_channels", "out_channels"):
        if config.get(key) is not None and config[key] % 4:
            return key, f"{config[key]} must be a multiple of 4 (2 x 2 packed latent channels)"
    if not config.get("num_layers", 19) and not config.get("num_single_layers", 38):
        return "num_layers", "0 with num_single_layers 0: the model needs at least one block"
    return head_dim_problem(config, default=128) or rope_axes_problem(config, "axes_dims_rope", (16, 56, 56),
                                                                     default_head=128)


#: TeaCache's rescale polynomial (highest degree first), fitted on the first double block's modulated
#: image input (``teacache_probe="modulated"``): github.com/ali-vilab/TeaCache, TeaCache4FLUX/teacache_flux.py
#: (fitted on FLUX.1-dev; sporch applies it to schnell too: none is published for it)
TEACACHE_COEFFICIENTS = {
    "flux.1-dev": (4.98651651e+02, -2.83781631e+02, 5.58554382e+01, -3.82021401e+00, 2.64230861e-01),
    "flux.1-schnell": (4.98651651e+02, -2.83781631e+02, 5.58554382e+01, -3.82021401e+00, 2.64230861e-01),
}
#: MagCache's magnitude ratios for 28 steps: diffusers 0.42.1 ``hooks/mag_cache.py`` ``FLUX_MAG_RATIOS``
#: (from github.com/Zehong-Ma/MagCache; tests/runtime/model/test_generic_cache_facts.py checks the copy)
FLUX_MAG_RATIOS = (1.0, 1.21094, 1.11719, 1.07812, 1.0625, 1.03906, 1.03125, 1.03906, 1.02344, 1.03125, 1.02344,
                   0.98047, 1.01562, 1.00781, 1.0, 1.00781, 1.0, 1.00781, 1.0, 1.0, 0.99609, 0.99609, 0.98047,
                   0.98828, 0.96484, 0.95703, 0.93359, 0.89062)
MAGCACHE_RATIOS = {"flux.1-dev": FLUX_MAG_RATIOS, "flux.1-schnell": FLUX_MAG_RATIOS}


FAMILY = Family(name="flux", title="Flux.1", classes=("FluxTransformer2DModel",), shape=shape, config_for=config_for,
                presets=PRESETS, lora_loader="FluxLoraLoaderMixin", cfg=False, pipeline_folders=PIPELINE_FOLDERS,
                pipeline_class="FluxPipeline", pipeline_parts=pipeline_parts, vae_class="AutoencoderKL",
                vae_tiling=True, vae_parallel=True, config_keys=CONFIG_KEYS, config_rules=config_rules,
                count_parameters=count_parameters,
                teacache_probe="modulated", teacache_coefficients=TEACACHE_COEFFICIENTS,
                magcache_ratios=MAGCACHE_RATIOS)
