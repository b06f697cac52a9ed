"""LTX-2 (diffusers ``LTX2VideoTransformer3DModel``): video and audio generated together.

Each block runs a video stream (self-attention, cross-attention to the text, feed-forward) and an
audio stream beside it, joined by two cross-attentions (audio-to-video: video queries, audio keys;
video-to-audio: audio queries, video keys). The video tokens (one per latent pixel of a VAE that
folds 8 frames x 32 x 32 pixels) are split over the sequence ranks; the audio stream (about 25
latent frames a second) runs whole on every rank, its attention local, except the video-to-audio
attention, which attends to the video keys of every rank (sequence-parallel, every rank's queries
the whole audio). The class's own ``_cp_plan`` splits the video RoPE tables as 3-D tensors, but the
published configs use ``rope_type: split``, whose tables are [batch, heads, tokens, width] (4-D),
and it leaves the audio-to-video RoPE table (one row per video token) whole: sporch ships the plan
below, which splits both as they come out of their modules.
"""

from __future__ import annotations

from typing import Any, Mapping

from typing import Optional

from .base import Family, FamilyPreset, ParameterCount, feed_forward, linear
from .plan_format import GatherOutput, SplitInput

#: split RoPE tables: [batch, heads, tokens, width / 2]
_ROPE = {0: SplitInput(split_dim=2, expected_dims=4, split_output=True),
         1: SplitInput(split_dim=2, expected_dims=4, split_output=True)}

LTX2_PLAN = {
    "": {"hidden_states": SplitInput(split_dim=1, expected_dims=3),
         "encoder_hidden_states": SplitInput(split_dim=1, expected_dims=3),
         "encoder_attention_mask": SplitInput(split_dim=1, expected_dims=2)},
    "rope": _ROPE,
    "cross_attn_rope": _ROPE,  # the audio-to-video / video-to-audio tables of the video tokens
    "proj_out": GatherOutput(gather_dim=1, expected_dims=3),
}
#: the audio stream's attention that runs whole on every rank (self, text, and audio-to-video: its keys
#: are the whole audio); video-to-audio stays sequence-parallel (its keys are the split video)
AUDIO_LOCAL = ("transformer_blocks.*.audio_attn1", "transformer_blocks.*.audio_attn2",
               "transformer_blocks.*.audio_to_video_attn")

#: LTX2Pipeline's prompt length (``max_sequence_length`` 1024)
TEXT_LEN = 1024

#: Lightricks/LTX-2 (19B): diffusers' scripts/convert_ltx2_to_diffusers.py, get_ltx2_transformer_config("2.0"),
#: the transformer config.json it writes (the keys that set the shape and the layers)
LTX_2 = {"in_channels": 128, "out_channels": 128, "patch_size": 1, "patch_size_t": 1, "num_attention_heads": 32,
         "attention_head_dim": 128, "cross_attention_dim": 4096, "vae_scale_factors": [8, 32, 32], "gated_attn": False,
         "cross_attn_mod": False, "audio_in_channels": 128, "audio_out_channels": 128, "audio_patch_size": 1,
         "audio_patch_size_t": 1, "audio_num_attention_heads": 32, "audio_attention_head_dim": 64,
         "audio_cross_attention_dim": 2048, "audio_gated_attn": False, "audio_cross_attn_mod": False, "num_layers": 48,
         "qk_norm": "rms_norm_across_heads", "norm_elementwise_affine": False, "caption_channels": 3840,
         "attention_bias": True, "attention_out_bias": True, "rope_type": "split", "use_prompt_embeddings": True,
         "perturbed_attn": False}
#: Lightricks/LTX-2.3: the same script's "2.3" config (gated attention, prompt modulation, perturbed attention,
#: the connectors project the text to the streams' widths)
LTX_2_3 = {**LTX_2, "gated_attn": True, "cross_attn_mod": True, "audio_gated_attn": True, "audio_cross_attn_mod": True,
           "use_prompt_embeddings": False, "perturbed_attn": True}
#: Lightricks/LTX-2.5: the "2.5" config (2.3's blocks, no video feed-forward bias, a keyframe position embedding)
LTX_2_5 = {**LTX_2_3, "ff_bias": False, "use_keyframes_abs_pos_embedding": True}
_SOURCE = ("github.com/huggingface/diffusers scripts/convert_ltx2_to_diffusers.py, get_ltx2_transformer_config({!r}), "
           "the transformer config.json it writes for {}")


def split_refusal(config: Mapping[str, Any]) -> Optional[str]:
    """Why sporch's split plan is not exact for this config: interleaved RoPE tables are 3-D, which the
    plan (written for the published ``rope_type: split``) leaves whole; the video-to-audio attention,
    split over the Ulysses ranks by the video's head split, needs as many audio heads as video heads."""
    if config.get("rope_type", "interleaved") != "split":
        return (f"rope_type {config.get('rope_type', 'interleaved')!r}: sporch's LTX-2 split plan splits the 4-D "
                "RoPE tables of rope_type 'split' (every published LTX-2 config)")
    heads, audio = int(config.get("num_attention_heads", 32)), int(config.get("audio_num_attention_heads", 32))
    if heads != audio:
        return (f"audio_num_attention_heads {audio} != num_attention_heads {heads}: the video-to-audio attention is "
                "split over the Ulysses ranks as the video heads are")
    return None


def shape(config: Mapping[str, Any]) -> dict:
    heads, hd = int(config.get("num_attention_heads", 32)), int(config.get("attention_head_dim", 128))
    hidden = heads * hd
    pt, p = int(config.get("patch_size_t", 1)), int(config.get("patch_size", 1))
    return {
        "attention": "cross", "depth": int(config.get("num_layers", 48)), "single_depth": 0,
        "hidden": hidden, "num_heads": heads, "num_kv_heads": heads, "head_dim": hd, "ffn_dim": 4 * hidden,
        "patch": [pt, p, p], "in_channels": int(config.get("in_channels", 128)),
        "vae_stride": [int(s) for s in config.get("vae_scale_factors", (8, 32, 32))], "text_len": TEXT_LEN,
        "text_dim": int(config.get("caption_channels", 3840)), "qk_norm": True,
    }


def _attention(query: int, heads: int, hd: int, kv_in: int, bias: bool, out_bias: bool, gated: bool) -> int:
    """LTX2Attention: q/k/v/out projections, RMS q/k norms across heads, a per-head gate."""
    inner = heads * hd
    return (2 * inner + linear(query, inner, bias) + 2 * linear(kv_in, inner, bias) + linear(inner, query, out_bias)
            + (linear(query, heads) if gated else 0))


def _adaln(dim: int, n: int) -> int:
    """LTX2AdaLayerNormSingle(dim, n): a timestep MLP (256 -> dim -> dim) and its n-way modulation."""
    return linear(256, dim) + linear(dim, dim) + linear(dim, n * dim)


def count_parameters(config: Mapping[str, Any]) -> ParameterCount:
    """LTX2VideoTransformer3DModel's parameters from its config.json (diffusers 0.42.1's layers; the class's
    defaults for absent keys): blocks (video and audio self-attention, text cross-attention, audio-to-video
    and video-to-audio attention with the audio heads, both feed-forwards, the per-block modulation tables)
    and the root (input projections, caption projections where the model projects the text, the timestep
    modulations of both streams and of their cross-attention, the output tables and projections)."""
    heads, hd = int(config.get("num_attention_heads", 32)), int(config.get("attention_head_dim", 128))
    aheads, ahd = int(config.get("audio_num_attention_heads", 32)), int(config.get("audio_attention_head_dim", 64))
    h, a = heads * hd, aheads * ahd
    cx, acx = int(config.get("cross_attention_dim", 4096)), int(config.get("audio_cross_attention_dim", 2048))
    bias, ob = bool(config.get("attention_bias", True)), bool(config.get("attention_out_bias", True))
    vg, ag = bool(config.get("gated_attn", False)), bool(config.get("audio_gated_attn", False))
    vmod, amod = bool(config.get("cross_attn_mod", False)), bool(config.get("audio_cross_attn_mod", False))
    ff_bias, aff_bias = bool(config.get("ff_bias", True)), bool(config.get("audio_ff_bias", True))
    affine = 4 * (h + a) if config.get("norm_elementwise_affine", False) else 0  # each stream's 4 RMS norms
    block = (_attention(h, heads, hd, h, bias, ob, vg) + _attention(a, aheads, ahd, a, bias, ob, ag)
             + _attention(h, heads, hd, cx, bias, ob, vg) + _attention(a, aheads, ahd, acx, bias, ob, ag)
             + _attention(h, aheads, ahd, a, bias, ob, vg) + _attention(a, aheads, ahd, h, bias, ob, ag)
             + linear(h, 4 * h, ff_bias) + linear(4 * h, h, ff_bias) + linear(a, 4 * a, aff_bias)
             + linear(4 * a, a, aff_bias)
             + (9 if vmod else 6) * h + (9 if amod else 6) * a + (2 * (h + a) if vmod or amod else 0)
             + 5 * (h + a) + affine)
    c_in, ac_in = int(config.get("in_channels", 128)), int(config.get("audio_in_channels", 128))
    c_out = int(config.get("out_channels", 128) or c_in)
    ac_out = int(config.get("audio_out_channels", 128) or ac_in)
    caption = int(config.get("caption_channels", 3840))
    root = (linear(c_in, h) + linear(ac_in, a) + (h if config.get("use_keyframes_abs_pos_embedding") else 0)
            + (linear(caption, h) + linear(h, h) + linear(caption, a) + linear(a, a)
               if config.get("use_prompt_embeddings", True) else 0)
            + _adaln(h, 9 if vmod else 6) + _adaln(a, 9 if amod else 6)
            + _adaln(h, 4) + _adaln(a, 4) + _adaln(h, 1) + _adaln(a, 1)
            + (_adaln(h, 2) + _adaln(a, 2) if (vmod or amod) and config.get("use_prompt_adaln_single", True) else 0)
            + 2 * (h + a) + linear(h, c_out) + linear(a, ac_out))
    depth = int(config.get("num_layers", 48))
    return ParameterCount(blocks=depth * block, largest_block=block if depth else 0, root=root)


FAMILY = Family(
    name="ltx2", title="LTX-2", classes=("LTX2VideoTransformer3DModel",), shape=shape,
    split_plans={"LTX2VideoTransformer3DModel": LTX2_PLAN}, local_attention=AUDIO_LOCAL,
    presets=(FamilyPreset("ltx-2", LTX_2, _SOURCE.format("2.0", "Lightricks/LTX-2") + " (19B)",
                          parameters=ParameterCount(18_531_581_952, 386_074_624, 344_592_640)),
             FamilyPreset("ltx-2.3", LTX_2_3, _SOURCE.format("2.3", "Lightricks/LTX-2.3"),
                          parameters=ParameterCount(18_561_377_280, 386_695_360, 427_460_864)),
             FamilyPreset("ltx-2.5", LTX_2_5, _SOURCE.format("2.5", "Lightricks/LTX-2.5"),
                          parameters=ParameterCount(18_560_394_240, 386_674_880, 427_464_960))),
    count_parameters=count_parameters, split_refusal=split_refusal, lora_loader="LTX2LoraLoaderMixin", step_cache=(),
    step_cache_refusal=(
        "its blocks (LTX2VideoTransformerBlock, two streams) are not in diffusers' "
        "TransformerBlockRegistry, which the step caches read a block's outputs from"),
)
