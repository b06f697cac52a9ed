"""CogView4 (diffusers ``CogView4Transformer2DModel``: neither a ``_cp_plan`` nor a table here; its
split plan is derived, runtime/models/derive.py).

MMDiT-style joint attention over [text, image] inside each block (the GLM-4 text stream is updated
by every block, so the derived plan cuts it with the image), 2-D RoPE on the image tokens from the
class's own rope module. Latents: 16 channels, 8 x 8 pixels each, patch 2 x 2. Generate runs
``CogView4Pipeline``, whose true CFG calls the transformer twice per step (``cache_context("cond")``
then ``"uncond"``): ``parallel.cfg=2`` computes one call on each cfg rank.
"""

from __future__ import annotations

from typing import Any, Mapping, Optional

from .base import Family, FamilyPreset, ParameterCount, PipelineCfg, feed_forward, linear
from .rope_rules import head_width, integer

#: huggingface.co/THUDM/CogView4-6B transformer/config.json (6B): the values diffusers'
#: scripts/convert_cogview4_to_diffusers.py gives the class that wrote it (rope_axes_dim and
#: sample_size at the class's defaults, (256, 256) and 128).
COGVIEW4_6B = {"patch_size": 2, "in_channels": 16, "out_channels": 16, "num_layers": 28, "attention_head_dim": 128,
               "num_attention_heads": 32, "text_embed_dim": 4096, "time_embed_dim": 512, "condition_dim": 256,
               "pos_embed_max_size": 128, "sample_size": 128, "rope_axes_dim": [256, 256]}
#: CogView4Pipeline pads the prompt to its own length rounded up to 16 tokens, at most its
#: max_sequence_length (1024): the planner's bound (set model.text_len for shorter prompts).
TEXT_LEN = 1024

#: The generate workload's pipeline folder (CogView4Pipeline: GLM-4 text encoder and its tokenizer).
PIPELINE_FOLDERS = ("text_encoder", "tokenizer", "vae", "scheduler", "transformer")

#: The published pipeline's other parts (plan/pipeline_estimate.py's memory estimate; keys as wan.PARTS):
#: diffusers' scripts/convert_cogview4_to_diffusers.py, which wrote huggingface.co/THUDM/CogView4-6B: the
#: text encoder from THUDM/glm-4-9b-hf (config.json: 40 layers x 4096, 32 heads, 2 KV heads, FFN 13696,
#: vocabulary 151552, q/k/v biases), loaded by the pipeline as transformers' ``GlmModel``; the VAE
#: ``AutoencoderKL`` of the script's vae_config (16 latent channels, block_out_channels [128, 512, 1024, 1024],
#: 3 layers per block, no quant convs, no mid-block attention, sample_size 1024: enable_tiling's default
#: tiles of 1024 x 1024 pixels). Counted with those values on the meta device (transformers 5.x, diffusers
#: 0.42.1).
PARTS: dict[str, Any] = {
    "text_encoder": "GLM-4-9B (GlmModel)", "text_encoder_parameters": 8_779_194_368, "text_encoder_layers": 40,
    "text_encoder_embedding": 151_552 * 4096, "text_encoder_layer": 203_960_832,
    "vae": "AutoencoderKL (16 channels)", "vae_parameters": 406_100_643, "vae_channels": 128, "vae_chunk_frames": 1,
    "vae_tile_pixels": 1024 * 1024}


def pipeline_parts(preset: Optional[str]) -> Optional[Mapping[str, Any]]:
    """The published CogView4-6B pipeline's text encoder and VAE (its one preset)."""
    return PARTS if preset == "cogview4-6b" else None


def shape(config: Mapping[str, Any]) -> dict:
    heads = integer(config, "num_attention_heads", 64)
    hd = head_width(config, "attention_head_dim", 40, multiple=4,
                    why="CogView4's RoPE rotates channel pairs over two axes of half the head each")
    hidden = heads * hd
    p = integer(config, "patch_size", 2)
    return {
        "attention": "joint", "depth": integer(config, "num_layers", 30), "single_depth": 0, "hidden": hidden,
        "num_heads": heads, "num_kv_heads": heads, "head_dim": hd, "ffn_dim": 4 * hidden, "patch": [1, p, p],
        "in_channels": integer(config, "in_channels", 16), "vae_stride": [1, 8, 8], "text_len": TEXT_LEN,
        "text_dim": integer(config, "text_embed_dim", 4096), "qk_norm": True,
    }


def count_parameters(config: Mapping[str, Any]) -> ParameterCount:
    """CogView4Transformer2DModel's parameters from its config.json (diffusers 0.42.1's layers; the
    class's defaults for absent keys): blocks (a 12-way modulation of both streams from the time
    embedding, shared q/k/v/out for text and image, one GELU FFN; q/k layer norms without weights)
    and the root (image patch and text projections, the timestep and size-condition MLPs, the output
    norm's 2-way modulation and projection)."""
    heads, hd = int(config.get("num_attention_heads", 64)), int(config.get("attention_head_dim", 40))
    h, p = heads * hd, int(config.get("patch_size", 2))
    ted, cd = int(config.get("time_embed_dim", 512)), int(config.get("condition_dim", 256))
    block = linear(ted, 12 * h) + 4 * linear(h, h) + feed_forward(h, 4 * h)
    root = (linear(int(config.get("in_channels", 16)) * p * p, h) + linear(int(config.get("text_embed_dim", 4096)), h)
            + linear(h, ted) + linear(ted, ted) + linear(6 * cd, ted) + linear(ted, ted) + linear(ted, 2 * h)
            + linear(h, p * p * int(config.get("out_channels", 16))))
    depth = int(config.get("num_layers", 30))
    return ParameterCount(blocks=depth * block, largest_block=block if depth else 0, root=root)


FAMILY = Family(
    name="cogview4", title="CogView4", classes=("CogView4Transformer2DModel",), shape=shape,
    derived=("CogView4Transformer2DModel",),
    presets=(FamilyPreset("cogview4-6b", COGVIEW4_6B, "huggingface.co/THUDM/CogView4-6B transformer/config.json (6B)",
                          parameters=ParameterCount(6_344_196_096, 226_578_432, 24_922_176)),),
    count_parameters=count_parameters,
    pipeline_folders=PIPELINE_FOLDERS, pipeline_class="CogView4Pipeline", pipeline_parts=pipeline_parts,
    pipeline_cfg=PipelineCfg.TWO_CALLS,  # true CFG: a "cond" then an "uncond" call per step, one per cfg rank
    vae_tiling=True,  # AutoencoderKL.enable_tiling: tiles of the config's sample_size (1024 for CogView4-6B's)
    vae_class="AutoencoderKL", vae_parallel=True,  # as SD3's and Flux.1's AutoencoderKL: row bands exact
    lora_loader=None, step_cache=(),  # LoRA and the step cache are not checked on this family yet
    step_cache_refusal="the step caches are not checked on CogView4's class yet (its split plan is derived)",
)
