"""CogVideoX (diffusers ``CogVideoXTransformer3DModel``, which has no ``_cp_plan``: sporch ships the
split plan below).

The patch embedding concatenates text and video tokens and the model slices them apart again by
the text length; every block's attention joins them again ([text, video]) and rotates the video
part with the 3-D RoPE tables the pipeline passes in. So text and video are split as they enter
the first block, and the RoPE tables (one row per video token) at every block.
"""

from __future__ import annotations

from typing import Any, Mapping, Optional

from .base import T5_XXL_ENCODER, Family, PipelineCfg, FamilyPreset, ParameterCount, feed_forward, linear
from .config_rules import Flag, Int, Number, Text
from .plan_format import GatherOutput, SplitInput

COGVIDEOX_PLAN = {
    "transformer_blocks.0": {"hidden_states": SplitInput(split_dim=1, expected_dims=3),
                             "encoder_hidden_states": SplitInput(split_dim=1, expected_dims=3)},
    "transformer_blocks.*": {"image_rotary_emb": (SplitInput(split_dim=0, expected_dims=2),
                                                  SplitInput(split_dim=0, expected_dims=2))},
    "proj_out": GatherOutput(gather_dim=1, expected_dims=3),
}

#: The generate workload's pipeline folder (CogVideoXPipeline, text encoder T5): its sub-folders.
PIPELINE_FOLDERS = ("text_encoder", "tokenizer", "vae", "scheduler", "transformer")

#: THUDM/CogVideoX-5b transformer/config.json (Hugging Face).
COGVIDEOX_5B = {"num_attention_heads": 48, "attention_head_dim": 64, "in_channels": 16, "out_channels": 16,
                "time_embed_dim": 512, "text_embed_dim": 4096, "num_layers": 42, "sample_width": 90,
                "sample_height": 60, "sample_frames": 49, "patch_size": 2, "temporal_compression_ratio": 4,
                "max_text_seq_length": 226, "use_rotary_positional_embeddings": True}


#: The published pipeline's other parts (plan/pipeline_estimate.py's memory estimate; keys as wan.PARTS),
#: huggingface.co/THUDM/CogVideoX-5b text_encoder/config.json: T5EncoderModel (T5 v1.1 XXL: 24 layers x 4096,
#: FFN 10240, vocabulary 32128), vae/config.json: AutoencoderKLCogVideoX (block_out_channels [128, 256, 256,
#: 512]: 128 decoder channels at full resolution; it decodes 2 latent frames, 8 video frames, at a time:
#: ``num_latent_frames_batch_size``). Counted with those configs on the meta device (transformers, diffusers
#: 0.42.1; tests/runtime/models/test_generic_pipeline_parts.py).
PARTS: dict[str, Any] = {
    **T5_XXL_ENCODER,
    "vae": "AutoencoderKLCogVideoX", "vae_parameters": 215_583_907, "vae_channels": 128, "vae_chunk_frames": 8,
    "vae_tile_pixels": 240 * 360}  # enable_tiling's default: half the VAE's sample_height x sample_width (480 x 720)


def pipeline_parts(preset: Optional[str]) -> Optional[Mapping[str, Any]]:
    """The published CogVideoX-5b pipeline's text encoder and VAE."""
    return PARTS if preset == "cogvideox-5b" else None


def shape(config: Mapping[str, Any]) -> dict:
    heads, hd = int(config.get("num_attention_heads", 30)), int(config.get("attention_head_dim", 64))
    hidden = heads * hd
    p, pt = int(config.get("patch_size", 2)), int(config.get("patch_size_t") or 1)
    return {
        "attention": "joint", "depth": int(config.get("num_layers", 30)), "single_depth": 0, "hidden": hidden,
        "num_heads": heads, "num_kv_heads": heads, "head_dim": hd, "ffn_dim": 4 * hidden, "patch": [pt, p, p],
        "in_channels": int(config.get("in_channels", 16)),
        "vae_stride": [int(config.get("temporal_compression_ratio", 4)), 8, 8],
        "text_len": int(config.get("max_text_seq_length", 226)), "text_dim": int(config.get("text_embed_dim", 4096)),
        "qk_norm": True,
    }


def count_parameters(config: Mapping[str, Any]) -> ParameterCount:
    """CogVideoXTransformer3DModel's parameters from its config.json (diffusers 0.42.1's layers; the
    class's defaults for absent keys): blocks (two adaptive LayerNorms fed by the ``time_embed_dim``-wide
    timestep embedding, q/k/v/out with LayerNorm q/k norms, FFN) and the root (patch and text
    projections, timestep and ``ofs`` MLPs, final norms, output projection)."""
    heads, hd = int(config.get("num_attention_heads", 30)), int(config.get("attention_head_dim", 64))
    h, p, pt = heads * hd, int(config.get("patch_size", 2)), config.get("patch_size_t")
    temb, affine = int(config.get("time_embed_dim", 512)), bool(config.get("norm_elementwise_affine", True))
    c_in, c_out = int(config.get("in_channels", 16)), int(config.get("out_channels", 16))
    norm = 2 * h if affine else 0
    block = (2 * (linear(temb, 6 * h) + norm) + 4 * hd + 3 * linear(h, h, bool(config.get("attention_bias", True)))
             + linear(h, h) + feed_forward(h, 4 * h))
    if pt is None:  # CogVideoX 1.0: a 2-D convolution per frame
        patch, out = c_in * p * p * h + (h if config.get("patch_bias", True) else 0), p * p * c_out
    else:  # CogVideoX 1.5: a linear over pt x p x p patches
        patch, out = linear(c_in * p * p * int(pt), h), p * p * int(pt) * c_out
    ofs = int(config.get("ofs_embed_dim") or 0)
    root = (patch + linear(int(config.get("text_embed_dim", 4096)), h) + linear(h, temb) + linear(temb, temb)
            + (linear(ofs, ofs) * 2 if ofs else 0) + norm + linear(temb, 2 * h) + norm + linear(h, out))
    depth = int(config.get("num_layers", 30))
    return ParameterCount(blocks=depth * block, largest_block=block if depth else 0, root=root)


#: CogVideoXTransformer3DModel's constructor arguments (diffusers 0.42.1) and their values.
CONFIG_KEYS = {
    "num_attention_heads": Int(), "attention_head_dim": Int(2), "in_channels": Int(), "out_channels": Int(optional=True),
    "flip_sin_to_cos": Flag(), "freq_shift": Int(0), "time_embed_dim": Int(), "ofs_embed_dim": Int(optional=True),
    "text_embed_dim": Int(), "num_layers": Int(), "dropout": Number(0, 1), "attention_bias": Flag(),
    "sample_width": Int(), "sample_height": Int(), "sample_frames": Int(), "patch_size": Int(),
    "patch_size_t": Int(optional=True), "temporal_compression_ratio": Int(), "max_text_seq_length": Int(),
    "activation_fn": Text(), "timestep_activation_fn": Text(), "norm_elementwise_affine": Flag(),
    "norm_eps": Number(0, 1, open_min=True), "spatial_interpolation_scale": Number(0, open_min=True),
    "temporal_interpolation_scale": Number(0, open_min=True), "use_rotary_positional_embeddings": Flag(),
    "use_learned_positional_embeddings": Flag(), "patch_bias": Flag()}


def config_rules(config: Mapping[str, Any]) -> Optional[tuple[str, str]]:
    """CogVideoX's 3-D RoPE splits the head width 2 : 3 : 3 over (frame, row, column), each axis in
    channel pairs: a multiple of 16."""
    hd = config.get("attention_head_dim", 64)
    if config.get("use_rotary_positional_embeddings") and hd % 16:
        return "attention_head_dim", (f"{hd} must be a multiple of 16 with use_rotary_positional_embeddings (3-D RoPE "
                                      "gives the frame a quarter and rows and columns 3/8 each, in channel pairs)")
    return None

#: TeaCache's rescale polynomial (highest degree first), fitted on the time embedding ``emb`` (the
#: ``temb`` CogVideoX's blocks get: ``teacache_probe="timestep"``): github.com/ali-vilab/TeaCache,
#: TeaCache4CogVideoX1.5/teacache_sample_video.py, its "CogVideoX-5b" entry
TEACACHE_COEFFICIENTS = {
    "cogvideox-5b": (-1.53880483e+03, 8.43202495e+02, -1.34363087e+02, 7.97131516e+00, -5.23162339e-02),
}


FAMILY = Family(
    name="cogvideox", title="CogVideoX", classes=("CogVideoXTransformer3DModel",), shape=shape,
    lora_loader="CogVideoXLoraLoaderMixin",
    split_plans={"CogVideoXTransformer3DModel": COGVIDEOX_PLAN},
    presets=(FamilyPreset("cogvideox-5b", COGVIDEOX_5B, "huggingface.co/THUDM/CogVideoX-5b transformer/config.json",
                          parameters=ParameterCount(5_552_300_544, 132_197_632, 17_982_528)),),
    pipeline_folders=PIPELINE_FOLDERS, pipeline_class="CogVideoXPipeline", video=True, pipeline_parts=pipeline_parts,
    count_parameters=count_parameters,
    pipeline_cfg=PipelineCfg.BATCHED,  # [uncond, cond] in one transformer call: parallel.cfg=2 splits its rows
    vae_tiling=True,  # AutoencoderKLCogVideoX.enable_tiling: half the sample size (240 x 360 for CogVideoX-5b)
    vae_class="AutoencoderKLCogVideoX", vae_parallel=True, teacache_coefficients=TEACACHE_COEFFICIENTS,
    config_keys=CONFIG_KEYS, flow_scheduler=False, config_rules=config_rules,
)
