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
from sporch.orchestrator.models.checkpoint_files import CheckpointError
from sporch.orchestrator.models.families.original_format import LoraName, LoraStyle, OriginalFormat, Shapes

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
#: (from github.com/Zehong-Ma/MagCache; tests/runtime/models/test_generic_cache_facts.py checks the copy)
FLUX_MAG_RATIOS = (1.0, 1.21094, 1.11719, 1.07812, 1.0625, 1.03906, 1.03125, 1.03906, 1.02344, 1.03125, 1.02344,
                   0.98047, 1.01562, 1.00781, 1.0, 1.00781, 1.0, 1.00781, 1.0, 1.0, 0.99609, 0.99609, 0.98047,
                   0.98828, 0.96484, 0.95703, 0.93359, 0.89062)
MAGCACHE_RATIOS = {"flux.1-dev": FLUX_MAG_RATIOS, "flux.1-schnell": FLUX_MAG_RATIOS}


#: Flux.1's RoPE axes (t, h, w) over its 128-wide heads: BFL's files do not record them
ORIGINAL_ROPE_AXES = (16, 56, 56)
ORIGINAL_HEAD_DIM = 128
#: the width diffusers' converter assumes when it cuts a single block's ``linear1`` into q, k, v and
#: the MLP input (3 x 3072 + 4 x 3072 rows)
CONVERTER_WIDTH = 3072


def _shape(shapes: Shapes, name: str) -> tuple:
    if name not in shapes:
        raise CheckpointError(f"the Black Forest Labs Flux checkpoint lacks tensor {name!r}; it is incomplete or "
                              "not a Flux.1 transformer")
    return tuple(shapes[name])


def _blocks(shapes: Shapes, prefix: str) -> int:
    found = {int(k.split(".")[1]) for k in shapes if k.startswith(prefix) and k.split(".")[1].isdigit()}
    if found and found != set(range(len(found))):
        raise CheckpointError(f"the Black Forest Labs Flux checkpoint's {prefix}* are not numbered 0 to "
                              f"{len(found) - 1} (found {sorted(found)[:5]}...)")
    return len(found)


def diffusers_config_from_original(config: Mapping[str, Any], shapes: Shapes) -> dict:
    """The ``FluxTransformer2DModel`` config of a Black Forest Labs checkpoint (``flux1-dev.safetensors``;
    names without prefix), read from its tensors' ``shapes``: BFL ships no config.json. ``config``:
    what else is known of the model in diffusers' keys (a preset's or the plan's config); only its
    ``axes_dims_rope`` is read (Flux.1's (16, 56, 56) for 128-wide heads, which the file does not
    record). One-line CheckpointError for a checkpoint the class cannot be."""
    inner, packed = _shape(shapes, "img_in.weight")
    head_dim = _shape(shapes, "double_blocks.0.img_attn.norm.query_norm.scale")[0]
    if inner % head_dim:
        raise CheckpointError(f"the Black Forest Labs Flux checkpoint's width {inner} is not a multiple of its head "
                              f"size {head_dim}")
    mlp = _shape(shapes, "double_blocks.0.img_mlp.0.weight")[0]
    if mlp != 4 * inner:
        raise CheckpointError(f"the Black Forest Labs Flux checkpoint's MLP is {mlp} wide, not 4 x its width {inner} "
                              "(FluxTransformer2DModel's)")
    axes = config.get("axes_dims_rope")
    if axes is None:
        if head_dim != ORIGINAL_HEAD_DIM:
            raise CheckpointError(f"the Black Forest Labs Flux checkpoint has {head_dim}-wide heads and its format does "
                                  "not record the RoPE axes (Flux.1's 16, 56, 56 are for 128): name the model's preset")
        axes = ORIGINAL_ROPE_AXES
    out = _shape(shapes, "final_layer.linear.weight")[0]
    return {
        "_class_name": "FluxTransformer2DModel", "patch_size": 1, "in_channels": packed,
        "out_channels": None if out == packed else out,
        "num_layers": _blocks(shapes, "double_blocks."), "num_single_layers": _blocks(shapes, "single_blocks."),
        "attention_head_dim": head_dim, "num_attention_heads": inner // head_dim,
        "joint_attention_dim": _shape(shapes, "txt_in.weight")[1],
        "pooled_projection_dim": _shape(shapes, "vector_in.in_layer.weight")[1],
        "guidance_embeds": "guidance_in.in_layer.weight" in shapes, "axes_dims_rope": list(axes),
    }


def _double(original: str, *diffusers: str, parts: tuple[int, ...] | None = None) -> LoraName:
    return LoraName(f"double_blocks.{{i}}.{original}", tuple(f"transformer_blocks.{{i}}.{d}" for d in diffusers),
                    parts, blocks="num_layers")


def _single(original: str, *diffusers: str, parts: tuple[int, ...] | None = None) -> LoraName:
    return LoraName(f"single_blocks.{{i}}.{original}", tuple(f"single_transformer_blocks.{{i}}.{d}" for d in diffusers),
                    parts, blocks="num_single_layers")


#: FluxTransformer2DModel's linear modules and BFL's names for them (black-forest-labs/flux
#: ``flux/model.py``, ``flux/modules/layers.py``): q|k|v fused in the double blocks, q|k|v|MLP input
#: in the single blocks' linear1; the final modulation's halves are swapped by the converter.
LORA_NAMES = (
    LoraName("img_in", ("x_embedder",)), LoraName("txt_in", ("context_embedder",)),
    LoraName("time_in.in_layer", ("time_text_embed.timestep_embedder.linear_1",)),
    LoraName("time_in.out_layer", ("time_text_embed.timestep_embedder.linear_2",)),
    LoraName("guidance_in.in_layer", ("time_text_embed.guidance_embedder.linear_1",), when="guidance_embeds"),
    LoraName("guidance_in.out_layer", ("time_text_embed.guidance_embedder.linear_2",), when="guidance_embeds"),
    LoraName("vector_in.in_layer", ("time_text_embed.text_embedder.linear_1",)),
    LoraName("vector_in.out_layer", ("time_text_embed.text_embedder.linear_2",)),
    _double("img_mod.lin", "norm1.linear"), _double("txt_mod.lin", "norm1_context.linear"),
    _double("img_attn.qkv", "attn.to_q", "attn.to_k", "attn.to_v", parts=(1, 1, 1)),
    _double("txt_attn.qkv", "attn.add_q_proj", "attn.add_k_proj", "attn.add_v_proj", parts=(1, 1, 1)),
    _double("img_attn.proj", "attn.to_out.0"), _double("txt_attn.proj", "attn.to_add_out"),
    _double("img_mlp.0", "ff.net.0.proj"), _double("img_mlp.2", "ff.net.2"),
    _double("txt_mlp.0", "ff_context.net.0.proj"), _double("txt_mlp.2", "ff_context.net.2"),
    _single("modulation.lin", "norm.linear"),
    _single("linear1", "attn.to_q", "attn.to_k", "attn.to_v", "proj_mlp", parts=(1, 1, 1, 4)),
    _single("linear2", "proj_out"),
    LoraName("final_layer.adaLN_modulation.1", ("norm_out.linear",)), LoraName("final_layer.linear", ("proj_out",)),
)


#: Black Forest Labs' Flux.1 checkpoints (``flux1-dev.safetensors``, ``flux1-schnell.safetensors`` and
#: their fine-tunes, ComfyUI's ``model.diffusion_model.`` repackaging), by a double block's key norm
#: (diffusers' own marker for them). diffusers' converter cuts ``single_blocks.{i}.linear1`` into
#: q, k, v (one width each) and the MLP input (four) at Flux.1's width.
ORIGINAL = OriginalFormat(release="Black Forest Labs (flux1-*.safetensors)", class_name="FluxTransformer2DModel",
                          markers=("double_blocks.0.img_attn.norm.key_norm.scale",),
                          converter="convert_flux_transformer_checkpoint_to_diffusers",
                          diffusers_config=diffusers_config_from_original,
                          fixed_splits=(("single_blocks.{i}.linear1", (1, 1, 1, 4), CONVERTER_WIDTH),),
                          lora_names=LORA_NAMES, lora_style=LoraStyle("lora_unet_", underscored=True))


FAMILY = Family(name="flux", title="Flux.1", classes=("FluxTransformer2DModel",), shape=shape, config_for=config_for,
                presets=PRESETS, lora_loader="FluxLoraLoaderMixin", cfg=False, pipeline_folders=PIPELINE_FOLDERS,
                pipeline_class="FluxPipeline", pipeline_parts=pipeline_parts, vae_class="AutoencoderKL",
                vae_tiling=True, vae_parallel=True, config_keys=CONFIG_KEYS, config_rules=config_rules,
                count_parameters=count_parameters,
                teacache_probe="modulated", teacache_coefficients=TEACACHE_COEFFICIENTS,
                magcache_ratios=MAGCACHE_RATIOS, original=ORIGINAL)
