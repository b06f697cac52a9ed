"""PixArt-Sigma (diffusers ``PixArtTransformer2DModel``, which has no ``_cp_plan``: sporch ships the
split plan below).

A 2-D DiT with adaLN-single (one timestep modulation shared by every block, a 6-way table per
block): each block runs self-attention over the image tokens and cross-attention to the whole
T5 prompt (as Wan's), so the text stays whole on every rank (``text_split=False``) and only the
image tokens are cut. Latents: 4 channels, 8 x 8 pixels each (the SDXL VAE), patch 2 x 2; the
output has 8 channels (learned sigma: the pipeline keeps the first 4). ``PixArtSigmaPipeline``
batches both CFG passes into one transformer call (``[uncond, cond]``).

PixArt-Alpha's 1024 px model (``sample_size`` 128 without ``use_additional_conditions: false``)
also embeds the image's resolution and aspect ratio (``added_cond_kwargs``); verify
builds them (runtime family module ``inputs``), the generate runs PixArt-Sigma's pipeline only.

The published folders' transformer/config.json name diffusers' older shared class
``Transformer2DModel`` (with ``norm_type: ada_norm_single``), which diffusers' loader builds as
``PixArtTransformer2DModel``; ``legacy_classes`` says so, so such a folder plans as this family.
"""

from __future__ import annotations

from typing import Any, Mapping, Optional

from .base import T5_XXL_ENCODER, Family, FamilyPreset, ParameterCount, PipelineCfg, feed_forward, linear
from .config_rules import Fixed, Flag, Int, Number, Text
from .plan_format import GatherOutput, SplitInput

#: image tokens split after the patch embedding (which adds the 2-D sin-cos position table), whole
#: output gathered at proj_out (the unpatchify after it reads the input's height and width); the
#: text (cross-attention keys and values) is never split.
PIXART_PLAN = {
    "pos_embed": {0: SplitInput(split_dim=1, expected_dims=3, split_output=True)},
    "proj_out": GatherOutput(gather_dim=1, expected_dims=3),
}

#: huggingface.co/PixArt-alpha/PixArt-Sigma-XL-2-1024-MS, -512-MS and -2K-MS transformer/config.json
#: (the keys that set the shape; the three differ only in sample_size and interpolation_scale, the
#: position table's base size; 1024 and 2K state use_additional_conditions false, 512's sample_size 64
#: implies it).
PIXART_SIGMA_XL_2 = {"num_attention_heads": 16, "attention_head_dim": 72, "in_channels": 4, "out_channels": 8,
                     "num_layers": 28, "cross_attention_dim": 1152, "caption_channels": 4096, "patch_size": 2,
                     "norm_type": "ada_norm_single", "num_embeds_ada_norm": 1000, "attention_bias": True,
                     "activation_fn": "gelu-approximate", "norm_elementwise_affine": False, "norm_eps": 1e-6}
PIXART_SIGMA_1024 = {**PIXART_SIGMA_XL_2, "sample_size": 128, "interpolation_scale": 2,
                     "use_additional_conditions": False}
PIXART_SIGMA_512 = {**PIXART_SIGMA_XL_2, "sample_size": 64, "interpolation_scale": 1}
PIXART_SIGMA_2K = {**PIXART_SIGMA_XL_2, "sample_size": 256, "interpolation_scale": 4,
                   "use_additional_conditions": False}
TEXT_LEN = 300  # PixArtSigmaPipeline's max_sequence_length (the prompt padded to it, the mask dropping the padding)

#: The generate workload's pipeline folder (PixArtSigmaPipeline, text encoder T5): its sub-folders.
PIPELINE_FOLDERS = ("text_encoder", "tokenizer", "vae", "scheduler", "transformer")

#: The published pipelines' other parts (plan/pipeline_estimate.py's memory estimate; keys as wan.PARTS),
#: huggingface.co/PixArt-alpha/PixArt-Sigma-XL-2-1024-MS text_encoder/config.json: T5EncoderModel (T5 v1.1 XXL:
#: 24 layers x 4096, FFN 10240, vocabulary 32128); vae/config.json: AutoencoderKL, the SDXL VAE (4 latent
#: channels, block_out_channels [128, 256, 512, 512]: 128 decoder channels at full resolution, layers_per_block
#: 2, scaling_factor 0.13025, sample_size 512: enable_tiling's default tiles of 512 x 512 pixels). The 512 and
#: 2K repositories hold only the transformer; their pipelines take these parts (the PixArt-Sigma model card's
#: pipeline folder pixart_sigma_sdxlvae_T5_diffusers). Counted with those configs on the meta device
#: (transformers, diffusers 0.42.1; tests/runtime/models/test_generic_pipeline_parts.py).
PARTS: dict[str, Any] = {
    **T5_XXL_ENCODER,
    "vae": "AutoencoderKL (SDXL VAE, 4 channels)", "vae_parameters": 83_653_863, "vae_channels": 128,
    "vae_chunk_frames": 1, "vae_tile_pixels": 512 * 512}


def pipeline_parts(preset: Optional[str]) -> Optional[Mapping[str, Any]]:
    """The published PixArt-Sigma pipelines' text encoder and VAE (every resolution shares them)."""
    return PARTS if (preset or "").startswith("pixart-sigma-") else None


def additional_conditions(config: Mapping[str, Any]) -> bool:
    """Whether the class embeds resolution and aspect ratio (``use_additional_conditions``; unset:
    diffusers turns it on for ``sample_size`` 128, PixArt-Alpha's 1024 px model)."""
    value = config.get("use_additional_conditions")
    return bool(value) if value is not None else int(config.get("sample_size", 128)) == 128


def generate_refusal(config: Mapping[str, Any]) -> Optional[str]:
    """PixArtSigmaPipeline passes no resolution conditions, which PixArt-Alpha's 1024 px model needs."""
    if additional_conditions(config):
        return ("the model embeds resolution and aspect ratio (use_additional_conditions: PixArt-Alpha 1024), "
                "which PixArtSigmaPipeline does not pass")
    return None


def shape(config: Mapping[str, Any]) -> dict:
    heads, hd = int(config.get("num_attention_heads", 16)), int(config.get("attention_head_dim", 72))
    hidden = heads * hd
    p = int(config.get("patch_size", 2))
    return {
        "attention": "cross", "depth": int(config.get("num_layers", 28)), "single_depth": 0, "hidden": hidden,
        "num_heads": heads, "num_kv_heads": heads, "head_dim": hd, "ffn_dim": 4 * hidden, "patch": [1, p, p],
        "in_channels": int(config.get("in_channels", 4)), "vae_stride": [1, 8, 8], "text_len": TEXT_LEN,
        "text_dim": int(config.get("caption_channels") or config.get("cross_attention_dim") or hidden),
        "qk_norm": False,
    }


def count_parameters(config: Mapping[str, Any]) -> ParameterCount:
    """PixArtTransformer2DModel's parameters from its config.json (diffusers 0.42.1's layers; the
    class's defaults for absent keys): blocks (a 6-way scale/shift table, self-attention q/k/v/out,
    cross-attention with ``cross_attention_dim``-wide keys and values, GELU FFN; two LayerNorms, without
    affine parameters unless ``norm_elementwise_affine``) and the root (patch embedding, adaLN-single's
    timestep MLP and 6-way projection, the resolution and aspect-ratio MLPs with additional
    conditions, caption projection, output table and projection)."""
    heads, hd = int(config.get("num_attention_heads", 16)), int(config.get("attention_head_dim", 72))
    h, p = heads * hd, int(config.get("patch_size", 2))
    c_in = int(config.get("in_channels", 4))
    c_out = c_in if config.get("out_channels", 8) is None else int(config.get("out_channels", 8))
    cross = int(config.get("cross_attention_dim") or h)
    bias = bool(config.get("attention_bias", True))
    affine = 2 * h if config.get("norm_elementwise_affine", False) else 0
    block = (6 * h + 2 * affine  # norm1, norm2 (adaLN-single's blocks have no norm3)
             + 3 * linear(h, h, bias) + linear(h, h)  # self-attention (out projection always biased)
             + linear(h, h, bias) + 2 * linear(cross, h, bias) + linear(h, h)  # cross-attention
             + feed_forward(h, 4 * h))
    size = h // 3  # the resolution / aspect-ratio embeddings' width
    added = 2 * (linear(256, size) + linear(size, size)) if additional_conditions(config) else 0
    caption = config.get("caption_channels")
    root = (c_in * p * p * h + h + linear(256, h) + linear(h, h) + added + linear(h, 6 * h)
            + (linear(int(caption), h) + linear(h, h) if caption is not None else 0)
            + 2 * h + linear(h, p * p * c_out))
    depth = int(config.get("num_layers", 28))
    return ParameterCount(blocks=depth * block, largest_block=block if depth else 0, root=root)


#: PixArtTransformer2DModel's constructor arguments (diffusers 0.42.1) and their values, and the keys of the
#: older shared ``Transformer2DModel`` a published folder may carry, at the only values PixArt computes.
CONFIG_KEYS = {
    "num_attention_heads": Int(), "attention_head_dim": Int(), "in_channels": Int(), "out_channels": Int(optional=True),
    "num_layers": Int(), "dropout": Number(0, 1), "norm_num_groups": Int(), "cross_attention_dim": Int(optional=True),
    "attention_bias": Flag(), "sample_size": Int(), "patch_size": Int(), "activation_fn": Text(),
    "num_embeds_ada_norm": Int(optional=True), "upcast_attention": Flag(), "norm_type": Text("ada_norm_single"),
    "norm_elementwise_affine": Flag(), "norm_eps": Number(0, 1, open_min=True),
    "interpolation_scale": Number(0, optional=True, open_min=True), "use_additional_conditions": Flag(optional=True),
    "caption_channels": Int(optional=True), "attention_type": Text("default", None),
    # Transformer2DModel's (the legacy class name of the published folders)
    "only_cross_attention": Fixed(False), "double_self_attention": Fixed(False), "num_vector_embeds": Fixed(None),
    "use_linear_projection": Fixed(False)}

FAMILY = Family(
    name="pixart", title="PixArt-Sigma", classes=("PixArtTransformer2DModel",), shape=shape,
    legacy_classes={"Transformer2DModel": ("PixArtTransformer2DModel", {"norm_type": "ada_norm_single"})},
    split_plans={"PixArtTransformer2DModel": PIXART_PLAN}, text_split=False,
    lora_loader=None,  # PixArt's pipelines have no diffusers LoRA loader mixin
    presets=(FamilyPreset("pixart-sigma-xl-2-1024-ms", PIXART_SIGMA_1024,
                          "huggingface.co/PixArt-alpha/PixArt-Sigma-XL-2-1024-MS transformer/config.json (0.6B)",
                          parameters=ParameterCount(595_155_456, 21_255_552, 15_700_640)),
             FamilyPreset("pixart-sigma-xl-2-512-ms", PIXART_SIGMA_512,
                          "huggingface.co/PixArt-alpha/PixArt-Sigma-XL-2-512-MS transformer/config.json (0.6B)",
                          parameters=ParameterCount(595_155_456, 21_255_552, 15_700_640)),
             FamilyPreset("pixart-sigma-xl-2-2k-ms", PIXART_SIGMA_2K,
                          "huggingface.co/PixArt-alpha/PixArt-Sigma-XL-2-2K-MS transformer/config.json (0.6B)",
                          parameters=ParameterCount(595_155_456, 21_255_552, 15_700_640))),
    pipeline_folders=PIPELINE_FOLDERS, pipeline_class="PixArtSigmaPipeline", pipeline_parts=pipeline_parts,
    count_parameters=count_parameters,
    pipeline_cfg=PipelineCfg.BATCHED,  # [uncond, cond] in one transformer call: parallel.cfg=2 splits it
    vae_tiling=True,  # AutoencoderKL.enable_tiling: tiles of the config's sample_size (512 for PixArt-Sigma's)
    vae_class="AutoencoderKL", vae_parallel=True,  # the SDXL VAE: row bands exact, as SD3's AutoencoderKL
    generate_refusal=generate_refusal,
    config_keys=CONFIG_KEYS, flow_scheduler=False,
)
