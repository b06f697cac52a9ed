"""Wan2.1 / Wan2.2 (diffusers ``WanTransformer3DModel``, which carries its own ``_cp_plan``).

sporch also runs Wan on its hand-built path (``runtime/model/wan.py``; presets, checkpoint tables and
knobs in ``models/wan.py``); the generic path runs the diffusers class itself. Text stays
whole on every rank (cross-attention needs no communication).
"""

from __future__ import annotations

from typing import Any, Mapping, Optional

from sporch.orchestrator.models.families.base import Family

#: The generate workload's pipeline folder (WanPipeline): the sub-folders it reads.
PIPELINE_FOLDERS = ("text_encoder", "tokenizer", "vae", "scheduler", "transformer")

#: Parameters of the published pipelines' other parts (plan/pipeline_estimate.py's memory estimate): sizes,
#: the text encoder's blocks and embedding (a sharded encoder gathers one at a time, FSDP2), the
#: VAE's widest decoder channels, frames per causal chunk, and diffusers' tile size (``enable_tiling``).
#: Wan2.1 T2V and Wan2.2 A14B: umT5-XXL and the Wan2.1 VAE.
PARTS: dict[str, Any] = {
    "text_encoder": "umT5-XXL encoder", "text_encoder_parameters": 5_680_000_000,
    "text_encoder_layers": 24, "text_encoder_embedding": 256_384 * 4096,
    "vae": "AutoencoderKLWan", "vae_parameters": 127_000_000, "vae_channels": 96, "vae_chunk_frames": 4,
    "vae_tile_pixels": 256 * 256}
#: Wan2.2 TI2V-5B: umT5 as Wan2.1, the Wan2.2 VAE (48 latent channels, strides 4 x 16 x 16; its
#: decoder's last stages run 256 channels at half and 1024 at quarter resolution: 64 per output pixel)
PARTS_TI2V = {**PARTS, "vae": "AutoencoderKLWan (Wan2.2)", "vae_parameters": 704_700_000, "vae_channels": 64}
#: Wan2.1 I2V 14B (480p, 720p): umT5 and the Wan2.1 VAE, and the CLIP image encoder the pipeline folder
#: ships (image_encoder/: CLIPVisionModel, ViT-H/14 at 224 px, 32 layers 1280 wide; transformers' class with
#: that config.json counted on the meta device). The leader runs it in float32 (as diffusers' examples
#: load it) after the text encoder is freed and before the transformer is built.
PARTS_I2V = {**PARTS, "image_encoder": "CLIP ViT-H/14 vision (CLIPVisionModel)",
             "image_encoder_parameters": 630_766_080}


def pipeline_parts(preset: Optional[str]) -> Optional[Mapping[str, Any]]:
    """The published text encoder, VAE (and image encoder) of preset ``preset``; None for a
    preset whose parts sporch does not know (or a checkpoint folder without one)."""
    name = preset or ""
    if name.startswith(("wan2.1-t2v", "wan2.2-t2v-a14b")):
        return PARTS
    if name.startswith("wan2.2-ti2v"):
        return PARTS_TI2V
    if name.startswith("wan2.1-i2v"):
        return PARTS_I2V
    return None


def vae_stride(vae_config: Mapping[str, Any]) -> Optional[list]:
    """The latent strides of a Wan pipeline folder's VAE (``AutoencoderKLWan``'s
    ``scale_factor_temporal`` / ``scale_factor_spatial``: Wan2.1 4 x 8 x 8, the Wan2.2 VAE of
    TI2V-5B 4 x 16 x 16), or None for another VAE class; a ValueError for strides out of range."""
    if vae_config.get("_class_name") != "AutoencoderKLWan":
        return None
    st, sh = vae_config.get("scale_factor_temporal"), vae_config.get("scale_factor_spatial")
    st, sh = 4 if st is None else st, 8 if sh is None else sh
    if not all(isinstance(v, int) and not isinstance(v, bool) and 0 < v <= 64 for v in (st, sh)):
        raise ValueError(f"scale_factor_temporal {st!r} / scale_factor_spatial {sh!r} must be integers from 1 to 64")
    return [st, sh, sh]


def shape(config: Mapping[str, Any]) -> dict:
    heads, hd = int(config.get("num_attention_heads", 40)), int(config.get("attention_head_dim", 128))
    patch = [int(p) for p in config.get("patch_size", (1, 2, 2))]
    return {
        "attention": "cross", "depth": int(config.get("num_layers", 40)), "single_depth": 0,
        "hidden": heads * hd, "num_heads": heads, "num_kv_heads": heads, "head_dim": hd,
        "ffn_dim": int(config.get("ffn_dim", 13824)), "patch": patch, "in_channels": int(config.get("in_channels", 16)),
        "vae_stride": [4, 8, 8], "text_len": 512, "text_dim": int(config.get("text_dim", 4096)),
        "qk_norm": bool(config.get("qk_norm")),
    }


#: TeaCache's rescale polynomials (highest degree first), fitted on the time projection ``e0``
#: (diffusers' ``timestep_proj``, the ``temb`` Wan's blocks get: ``teacache_probe="timestep"``), the
#: ``use_ret_steps`` set: github.com/ali-vilab/TeaCache, TeaCache4Wan2.1/teacache_generate.py (T2V 1.3B
#: and 14B; I2V 14B, one polynomial per resolution). Wan2.2 has none published (the identity applies).
TEACACHE_COEFFICIENTS = {
    "wan2.1-t2v-1.3b": (-5.21862437e+04, 9.23041404e+03, -5.28275948e+02, 1.36987616e+01, -4.99875664e-02),
    "wan2.1-t2v-14b": (-3.03318725e+05, 4.90537029e+04, -2.65530556e+03, 5.87365115e+01, -3.15583525e-01),
    "wan2.1-i2v-14b-480p": (2.57151496e+05, -3.54229917e+04, 1.40286849e+03, -1.35890334e+01, 1.32517977e-01),
    "wan2.1-i2v-14b-720p": (8.10705460e+03, 2.13393892e+03, -3.72934672e+02, 1.66203073e+01, -4.17769401e-02),
}


FAMILY = Family(name="wan", title="Wan2.1 / Wan2.2", classes=("WanTransformer3DModel",), shape=shape,
                lora_loader="WanLoraLoaderMixin",
                hand_built=True, text_split=False, pipeline_folders=PIPELINE_FOLDERS, video=True,
                standin_attention="cross",
                pipeline_parts=pipeline_parts, vae_stride_from=vae_stride, vae_class="AutoencoderKLWan",
                vae_parallel=True, teacache_coefficients=TEACACHE_COEFFICIENTS)
