"""Flux.1 (diffusers ``FluxTransformer2DModel``, which carries its own ``_cp_plan``).

sporch also runs Flux on its hand-built path (``runtime/model/mmdit.py``; presets and checkpoint
tables in ``models/flux.py``); the generic path runs the diffusers class itself, text and
image tokens both split (joint attention is sequence-parallel over both).
"""

from __future__ import annotations

from typing import Any, Mapping, Optional

from sporch.orchestrator.models.checkpoint_files import CheckpointError
from sporch.orchestrator.models.families.base import T5_XXL_LAYER, Family
from sporch.orchestrator.models.families.original_format import LoraName, LoraStyle, OriginalFormat, Shapes

#: The generate workload's pipeline folder (FluxPipeline): the sub-folders it reads.
PIPELINE_FOLDERS = ("text_encoder", "tokenizer", "text_encoder_2", "tokenizer_2", "vae", "scheduler", "transformer")

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


FAMILY = Family(name="flux", title="Flux.1", classes=("FluxTransformer2DModel",), shape=shape, hand_built=True,
                lora_loader="FluxLoraLoaderMixin",
                cfg=False, pipeline_folders=PIPELINE_FOLDERS, standin_attention="joint", pipeline_parts=pipeline_parts,
                vae_class="AutoencoderKL", vae_parallel=True)
