"""FLUX.2 (diffusers ``Flux2Transformer2DModel``, which carries its own ``_cp_plan``): [dev] and [klein].

Double-stream blocks (joint attention over [text, image]) then single-stream blocks, as Flux.1, with
modulation shared by all blocks of a kind, SwiGLU feed-forwards, no biases and 4-axis RoPE
(t, h, w, l) on both streams; latents from a 32-channel VAE (8 x 8 pixels per latent) packed 2 x 2
into 128 channels; text states are three hidden layers of the text encoder stacked (Mistral Small
3.1 24B for [dev]: 3 x 5120; Qwen3 for [klein]: 3 x 2560, 3 x 4096). The ``_cp_plan`` splits image
and text tokens and both position-id tables at the model's input, so joint attention is
sequence-parallel over both. Generate runs ``Flux2Pipeline`` (FLUX.2 [dev]: Mistral 3 text encoder,
the guidance an embedded input, one pass per step); [klein]'s folders name ``Flux2KleinPipeline``
(Qwen3 text encoder), whose generate is refused in one line (``generate_refusal``).
"""

from __future__ import annotations

from typing import Any, Mapping, Optional

from .base import Family, FamilyPreset, ParameterCount, PipelineCfg, linear

#: black-forest-labs/FLUX.2-dev transformer config: diffusers' scripts/convert_flux2_to_diffusers.py
#: (``get_flux2_transformer_config("flux2-dev")``, the config it writes for that checkpoint)
FLUX2_DEV = {"patch_size": 1, "in_channels": 128, "num_layers": 8, "num_single_layers": 48, "attention_head_dim": 128,
             "num_attention_heads": 48, "joint_attention_dim": 15360, "timestep_guidance_channels": 256,
             "mlp_ratio": 3.0, "axes_dims_rope": [32, 32, 32, 32], "rope_theta": 2000, "eps": 1e-6}
#: FLUX.2 [klein] 4B and 9B: the same script's ``klein-4b`` / ``klein-9b`` configs (no guidance embedding)
FLUX2_KLEIN_4B = {**FLUX2_DEV, "num_layers": 5, "num_single_layers": 20, "num_attention_heads": 24,
                  "joint_attention_dim": 7680, "guidance_embeds": False}
FLUX2_KLEIN_9B = {**FLUX2_DEV, "num_layers": 8, "num_single_layers": 24, "num_attention_heads": 32,
                  "joint_attention_dim": 12288, "guidance_embeds": False}
_SOURCE = ("github.com/huggingface/diffusers scripts/convert_flux2_to_diffusers.py, get_flux2_transformer_config"
           "({!r}), the transformer config.json it writes")

#: Flux2Pipeline's prompt length (``max_sequence_length`` 512, every prompt padded to it)
TEXT_LEN = 512

#: The generate workload's pipeline folder (Flux2Pipeline: Mistral 3 text encoder and its processor).
PIPELINE_FOLDERS = ("text_encoder", "tokenizer", "vae", "scheduler", "transformer")

#: FLUX.2 [dev]'s other parts (plan/pipeline_estimate.py's memory estimate; keys as wan.PARTS), as diffusers'
#: scripts/convert_flux2_to_diffusers.py builds its folder: text_encoder/ Mistral3ForConditionalGeneration from
#: mistralai/Mistral-Small-3.2-24B-Instruct-2506 (config.json: language model 40 layers x 5120, 32 heads of 128,
#: 8 KV heads, FFN 32768, vocabulary 131072, LM head untied; Pixtral vision tower 24 layers x 1024, FFN 4096;
#: the projector without biases, spatial merge 2), vae/ ``AutoencoderKLFlux2()`` at its defaults (32 latent
#: channels, block_out_channels [128, 256, 512, 512], 2 layers per block, sample_size 1024: enable_tiling's
#: default tiles of 1024 x 1024 pixels). Counted with those values on the meta device (transformers 5.x,
#: diffusers 0.42.1).
PARTS: dict[str, Any] = {
    "text_encoder": "Mistral Small 3.2 24B (Mistral3ForConditionalGeneration)",
    "text_encoder_parameters": 23_340_272_640, "text_encoder_layers": 40 + 24,
    "text_encoder_embedding": 131_072 * 5120, "text_encoder_layer": 555_755_520,  # a language-model layer
    "vae": "AutoencoderKLFlux2 (32 channels)", "vae_parameters": 84_046_115, "vae_channels": 128,
    "vae_chunk_frames": 1, "vae_tile_pixels": 1024 * 1024}


def pipeline_parts(preset: Optional[str]) -> Optional[Mapping[str, Any]]:
    """FLUX.2 [dev]'s text encoder and VAE; None for [klein] (another pipeline) and test models."""
    return PARTS if preset == "flux.2-dev" else None


def generate_refusal(config: Mapping[str, Any]) -> Optional[str]:
    """A [klein] model (no guidance embedding) is published with Flux2KleinPipeline (a Qwen3 text encoder
    and true CFG for its base models), which the generic generate does not run."""
    if config.get("guidance_embeds", True):
        return None
    return ("a model without guidance_embeds is FLUX.2 [klein], whose folders name Flux2KleinPipeline (Qwen3 text "
            "encoder), not Flux2Pipeline")


def shape(config: Mapping[str, Any]) -> dict:
    heads, hd = int(config.get("num_attention_heads", 48)), int(config.get("attention_head_dim", 128))
    hidden = heads * hd
    return {
        "attention": "joint", "depth": int(config.get("num_layers", 8)),
        "single_depth": int(config.get("num_single_layers", 48)), "hidden": hidden, "num_heads": heads,
        "num_kv_heads": heads, "head_dim": hd, "ffn_dim": int(hidden * float(config.get("mlp_ratio", 3.0))),
        # packed latents: in_channels = latent channels x 2 x 2
        "patch": [1, 2, 2], "in_channels": int(config.get("in_channels", 128)) // 4, "vae_stride": [1, 8, 8],
        "text_len": TEXT_LEN, "text_dim": int(config.get("joint_attention_dim", 15360)), "qk_norm": True,
    }


def count_parameters(config: Mapping[str, Any]) -> ParameterCount:
    """Flux2Transformer2DModel's parameters from its config.json (diffusers 0.42.1's layers, no biases; the
    class's defaults for absent keys): double-stream blocks (image and text q/k/v/out, four q/k norms, two
    SwiGLU feed-forwards of ``mlp_ratio``), single-stream blocks (one fused q/k/v + feed-forward input
    projection, one fused output projection, two q/k norms) and the root (timestep and guidance MLPs, the
    three shared modulations, the two input projections, the output norm's modulation and projection)."""
    heads, hd = int(config.get("num_attention_heads", 48)), int(config.get("attention_head_dim", 128))
    h = heads * hd
    f = int(h * float(config.get("mlp_ratio", 3.0)))
    c_in = int(config.get("in_channels", 128))
    c_out = int(config.get("out_channels") or c_in)
    p = int(config.get("patch_size", 1))
    t = int(config.get("timestep_guidance_channels", 256))
    dual = 8 * h * h + 4 * hd + 2 * (linear(h, 2 * f, False) + linear(f, h, False))
    single = linear(h, 3 * h + 2 * f, False) + linear(h + f, h, False) + 2 * hd
    mlp = linear(t, h, False) + linear(h, h, False)  # a timestep (or guidance) embedding
    root = (mlp * (2 if config.get("guidance_embeds", True) else 1)
            + linear(h, 6 * h, False) * 2 + linear(h, 3 * h, False)  # double (image, text) and single modulation
            + linear(c_in, h, False) + linear(int(config.get("joint_attention_dim", 15360)), h, False)
            + linear(h, 2 * h, False) + linear(h, p * p * c_out, False))
    depth, single_depth = int(config.get("num_layers", 8)), int(config.get("num_single_layers", 48))
    largest = max(dual if depth else 0, single if single_depth else 0)
    return ParameterCount(blocks=depth * dual + single_depth * single, largest_block=largest, root=root)


FAMILY = Family(
    name="flux2", title="FLUX.2", classes=("Flux2Transformer2DModel",), shape=shape,
    lora_loader="Flux2LoraLoaderMixin", step_cache=(),
    step_cache_refusal=(
        "Flux2TransformerBlock takes no time embedding (FLUX.2 modulates once for the whole stack), which"
        " TeaCache's probe reads, and fbcache, taylorseer and magcache are not checked on it yet"),
    presets=(FamilyPreset("flux.2-dev", FLUX2_DEV, _SOURCE.format("flux2-dev") + " (32B)",
                          parameters=ParameterCount(31_406_964_736, 981_467_648, 816_316_416)),
             FamilyPreset("flux.2-klein-4b", FLUX2_KLEIN_4B, _SOURCE.format("klein-4b"),
                          parameters=ParameterCount(3_680_509_440, 245_367_296, 195_035_136)),
             FamilyPreset("flux.2-klein-9b", FLUX2_KLEIN_9B, _SOURCE.format("klein-9b"),
                          parameters=ParameterCount(8_724_162_560, 436_208_128, 354_418_688))),
    count_parameters=count_parameters,
    cfg=False,  # [dev]: embedded guidance; [klein]: step-distilled (its undistilled base's true CFG is not planned)
    pipeline_folders=PIPELINE_FOLDERS, pipeline_class="Flux2Pipeline", pipeline_parts=pipeline_parts,
    pipeline_cfg=PipelineCfg.NONE,  # guidance-distilled: one pass per step, nothing to split
    generate_refusal=generate_refusal,
    vae_tiling=True,  # AutoencoderKLFlux2.enable_tiling: tiles of the config's sample_size (1024)
    vae_class="AutoencoderKLFlux2", vae_parallel=True,  # AutoencoderKL's decoder layout: row bands exact
)
