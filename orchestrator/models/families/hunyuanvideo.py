"""HunyuanVideo (diffusers ``HunyuanVideoTransformer3DModel``, which has no ``_cp_plan``: sporch ships
the split plan below).

Dual-stream blocks (joint attention over [video, text]) then single-stream blocks (the two
concatenated); 3-D RoPE on the video tokens; a token refiner (``context_embedder``) that runs
self-attention over the whole prompt before the blocks, so its attention stays local. Text and
video are split as they enter the first dual-stream block, the RoPE tables as the rope module
returns them. The attention mask the model builds over [video, text] (a short prompt's padded
text tokens dropped) is cut at every block the same way, so each rank masks its own keys.
"""

from __future__ import annotations

from typing import Any, Mapping, Optional

from .base import Family, PipelineCfg, FamilyPreset, ParameterCount, feed_forward, linear, qk_norm_parameters
from .config_rules import Flag, Int, Ints, Number, Text, head_dim_problem, rope_axes_problem
from .plan_format import GatherOutput, SplitInput

#: the key mask [B, 1, 1, video + text] the forward builds from ``encoder_attention_mask``
_MASK = SplitInput(split_dim=3, expected_dims=4, segments=("hidden_states", "encoder_hidden_states"))

HUNYUAN_PLAN = {
    "rope": {0: SplitInput(split_dim=0, expected_dims=2, split_output=True),
             1: SplitInput(split_dim=0, expected_dims=2, split_output=True)},
    "transformer_blocks.0": {"hidden_states": SplitInput(split_dim=1, expected_dims=3),
                             "encoder_hidden_states": SplitInput(split_dim=1, expected_dims=3)},
    "transformer_blocks.*": {"attention_mask": _MASK},
    "single_transformer_blocks.*": {"attention_mask": _MASK},
    "proj_out": GatherOutput(gather_dim=1, expected_dims=3),
}

#: hunyuanvideo-community/HunyuanVideo transformer/config.json (Hugging Face), 13B.
HUNYUAN_VIDEO_13B = {"in_channels": 16, "out_channels": 16, "num_attention_heads": 24, "attention_head_dim": 128,
                     "num_layers": 20, "num_single_layers": 40, "num_refiner_layers": 2, "mlp_ratio": 4.0,
                     "patch_size": 2, "patch_size_t": 1, "qk_norm": "rms_norm", "guidance_embeds": True,
                     "text_embed_dim": 4096, "pooled_projection_dim": 768, "rope_theta": 256.0,
                     "rope_axes_dim": [16, 56, 56]}
TEXT_LEN = 256  # HunyuanVideoPipeline's max_sequence_length

#: The generate workload's pipeline folder (HunyuanVideoPipeline: Llama and CLIP text encoders).
PIPELINE_FOLDERS = ("text_encoder", "tokenizer", "text_encoder_2", "tokenizer_2", "vae", "scheduler", "transformer")


#: The published pipeline's other parts (plan/pipeline_estimate.py's memory estimate; keys as wan.PARTS),
#: huggingface.co/hunyuanvideo-community/HunyuanVideo text_encoder/config.json: LlamaModel (llava-llama-3-8b's
#: language model: 32 layers x 4096, GQA 8 KV heads, FFN 14336, vocabulary 128320, no LM head),
#: text_encoder_2/config.json: CLIPTextModel (CLIP-L: 12 layers x 768), vae/config.json:
#: AutoencoderKLHunyuanVideo (block_out_channels [128, 256, 512, 512]: 128 decoder channels at full
#: resolution; framewise decoding, on by default, decodes 16 frames at a time). Counted with those configs on
#: the meta device (transformers, diffusers 0.42.1; tests/runtime/models/test_generic_pipeline_parts.py).
PARTS: dict[str, Any] = {
    "text_encoder": "Llama-3-8B (llava-llama-3-8b LlamaModel) + CLIP-L text",
    "text_encoder_parameters": 7_505_186_816 + 123_060_480, "text_encoder_layers": 32 + 12,
    "text_encoder_embedding": 128_320 * 4096, "text_encoder_layer": 218_112_000,  # a Llama layer
    "vae": "AutoencoderKLHunyuanVideo", "vae_parameters": 246_478_803, "vae_channels": 128, "vae_chunk_frames": 16,
    "vae_tile_pixels": 256 * 256}


def pipeline_parts(preset: Optional[str]) -> Optional[Mapping[str, Any]]:
    """The published HunyuanVideo pipeline's text encoders and VAE."""
    return PARTS if preset == "hunyuanvideo" else None


def shape(config: Mapping[str, Any]) -> dict:
    heads, hd = int(config.get("num_attention_heads", 24)), int(config.get("attention_head_dim", 128))
    hidden = heads * hd
    p, pt = int(config.get("patch_size", 2)), int(config.get("patch_size_t", 1))
    return {
        "attention": "joint", "depth": int(config.get("num_layers", 20)),
        "single_depth": int(config.get("num_single_layers", 40)), "hidden": hidden, "num_heads": heads,
        "num_kv_heads": heads, "head_dim": hd, "ffn_dim": int(hidden * float(config.get("mlp_ratio", 4.0))),
        "patch": [pt, p, p], "in_channels": int(config.get("in_channels", 16)), "vae_stride": [4, 8, 8],
        "text_len": TEXT_LEN, "text_dim": int(config.get("text_embed_dim", 4096)), "qk_norm": True,
    }


def count_parameters(config: Mapping[str, Any]) -> ParameterCount:
    """HunyuanVideoTransformer3DModel's parameters from its config.json (diffusers 0.42.1's layers; the
    class's defaults for absent keys): dual-stream blocks (video and text modulation, joint q/k/v/out,
    both FFNs of ``mlp_ratio``), single-stream blocks (q/k/v, a 3-way modulation, the FFN's input and one
    output projection over [attention, FFN]) and the root (patch embedding, the token refiner with its
    own timestep and text MLPs and blocks of FFN ratio 4, the timestep / pooled-text / guidance MLPs,
    output norm and projection)."""
    heads, hd = int(config.get("num_attention_heads", 24)), int(config.get("attention_head_dim", 128))
    h = heads * hd
    f = int(h * float(config.get("mlp_ratio", 4.0)))
    p, pt = int(config.get("patch_size", 2)), int(config.get("patch_size_t", 1))
    c_in = int(config.get("in_channels", 16))
    c_out = int(config.get("out_channels", 16) or c_in)
    text, pooled = int(config.get("text_embed_dim", 4096)), int(config.get("pooled_projection_dim", 768))
    norm = qk_norm_parameters(config.get("qk_norm", "rms_norm"), hd)
    dual = 2 * linear(h, 6 * h) + 8 * linear(h, h) + 4 * norm + 2 * feed_forward(h, f)
    single = 3 * linear(h, h) + 2 * norm + linear(h, 3 * h) + linear(h, f) + linear(h + f, h)
    refiner = 2 * (2 * h) + 4 * linear(h, h) + feed_forward(h, 4 * h) + linear(h, 2 * h)
    mlp = linear(256, h) + linear(h, h)  # a timestep (or guidance) embedding
    root = (c_in * pt * p * p * h + h  # patch embedding (3-D convolution)
            + mlp + linear(text, h) + linear(h, h) + linear(text, h)  # refiner's timestep, pooled text, input
            + int(config.get("num_refiner_layers", 2)) * refiner
            + mlp + linear(pooled, h) + linear(h, h) + (mlp if config.get("guidance_embeds", True) else 0)
            + linear(h, 2 * h) + linear(h, pt * p * p * c_out))
    depth, single_depth = int(config.get("num_layers", 20)), int(config.get("num_single_layers", 40))
    largest = max(dual if depth else 0, single if single_depth else 0)
    return ParameterCount(blocks=depth * dual + single_depth * single, largest_block=largest, root=root)


#: HunyuanVideoTransformer3DModel's constructor arguments (diffusers 0.42.1) and their values.
CONFIG_KEYS = {
    "in_channels": Int(), "out_channels": Int(), "num_attention_heads": Int(), "attention_head_dim": Int(2),
    "num_layers": Int(0), "num_single_layers": Int(0), "num_refiner_layers": Int(0), "mlp_ratio": Number(0, open_min=True),
    "patch_size": Int(), "patch_size_t": Int(), "qk_norm": Text("rms_norm"), "guidance_embeds": Flag(),
    "text_embed_dim": Int(), "pooled_projection_dim": Int(), "rope_theta": Number(0, open_min=True),
    "rope_axes_dim": Ints(3, minimum=0), "image_condition_type": Text("latent_concat", "token_replace", None)}


def config_rules(config: Mapping[str, Any]) -> Optional[tuple[str, str]]:
    """Three even RoPE axes summing to the head width."""
    return head_dim_problem(config, default=128) or rope_axes_problem(config, "rope_axes_dim", (16, 56, 56),
                                                                     default_head=128)

#: TeaCache's rescale polynomial (highest degree first), fitted on the first double block's modulated
#: image input (the original release's ``img_norm1`` + ``img_mod``, diffusers' ``norm1``:
#: ``teacache_probe="modulated"``): github.com/ali-vilab/TeaCache,
#: TeaCache4HunyuanVideo/teacache_sample_video.py (HunyuanVideo 13B T2V, the weights of the preset)
TEACACHE_COEFFICIENTS = {
    "hunyuanvideo": (7.33226126e+02, -4.01131952e+02, 6.75869174e+01, -3.14987800e+00, 9.61237896e-02),
}


FAMILY = Family(
    name="hunyuanvideo", title="HunyuanVideo", classes=("HunyuanVideoTransformer3DModel",), shape=shape,
    lora_loader="HunyuanVideoLoraLoaderMixin",
    split_plans={"HunyuanVideoTransformer3DModel": HUNYUAN_PLAN}, local_attention=("context_embedder",),
    presets=(FamilyPreset("hunyuanvideo", HUNYUAN_VIDEO_13B,
                          "huggingface.co/hunyuanvideo-community/HunyuanVideo transformer/config.json (13B)",
                          parameters=ParameterCount(12_460_298_240, 339_831_296, 360_714_304)),),
    cfg=False,  # guidance-distilled: the guidance scale is an embedded input
    pipeline_folders=PIPELINE_FOLDERS, pipeline_class="HunyuanVideoPipeline", video=True,
    pipeline_parts=pipeline_parts, count_parameters=count_parameters,
    pipeline_cfg=PipelineCfg.NONE,  # guidance-distilled: sporch calls it with embedded guidance, one pass
    vae_tiling=True,  # AutoencoderKLHunyuanVideo.enable_tiling: 256 x 256-pixel tiles
    vae_class="AutoencoderKLHunyuanVideo",
    vae_parallel=True,  # its mid block (frame-causal attention over all tokens) runs on the gathered rows
    config_keys=CONFIG_KEYS, config_rules=config_rules,
    teacache_probe="modulated", teacache_coefficients=TEACACHE_COEFFICIENTS,
)
