"""Flux.1 (diffusers ``FluxTransformer2DModel``, which carries its own ``_cp_plan``).

sporch also runs Flux on its hand-built path (``runtime/model/mmdit.py``; presets and checkpoint
tables in ``models/flux.py``); the generic path runs the diffusers class itself, text and
image tokens both split (joint attention is sequence-parallel over both).
"""

from __future__ import annotations

from typing import Any, Mapping, Optional

from sporch.orchestrator.models.families.base import T5_XXL_LAYER, Family

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


#: TeaCache's rescale polynomial (highest degree first), fitted on the first double block's modulated
#: image input (``teacache_probe="modulated"``): github.com/ali-vilab/TeaCache, TeaCache4FLUX/teacache_flux.py
#: (fitted on FLUX.1-dev; sporch applies it to schnell too, as its hand-built path does: none is published for it)
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


FAMILY = Family(name="flux", title="Flux.1", classes=("FluxTransformer2DModel",), shape=shape, hand_built=True,
                lora_loader="FluxLoraLoaderMixin",
                cfg=False, pipeline_folders=PIPELINE_FOLDERS, standin_attention="joint", pipeline_parts=pipeline_parts,
                vae_class="AutoencoderKL", vae_parallel=True,
                teacache_probe="modulated", teacache_coefficients=TEACACHE_COEFFICIENTS,
                magcache_ratios=MAGCACHE_RATIOS)
