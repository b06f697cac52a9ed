"""HiDream-I1 (diffusers ``HiDreamImageTransformer2DModel``: no ``_cp_plan``; the plan derived from a
tiny instance fails, so sporch ships the table below).

Dual-stream blocks then single-stream blocks, as Flux.1, with three text streams: a T5 prompt, the
Llama-3.1 prompt read at a different hidden layer by every block (``llama_layers``: a block's text
is [T5, the last listed layer, its own layer], the block's own layer dropped again after it) and a
pooled CLIP embedding added to the time embedding. Every feed-forward of the image stream is a
mixture of experts (a shared expert plus top-2 of 4 routed ones per token), which routes each token
by itself, so cutting tokens leaves it exact. The text has no positions (its RoPE rows are the
identity), so the order of its tokens over the ranks does not matter.

Why the derived plan does not fit: the forward concatenates each block's Llama layer to the text
between blocks and cuts the block's output back by the whole text's length, so no cut at the
blocks' inputs keeps the text streams apart. The shipped plan cuts every text projection's output
(``caption_projection.*``) and the image after patchifying (``x_embedder``): every tensor the
forward concatenates is then this rank's own, and the lengths it cuts back by are this rank's. The
RoPE table, built over [image (whole), text (this rank's)], is cut as segments: the image's rows as
the image, the text's kept. A non-square image is padded by the class to ``max_resolution`` tokens
with a key mask, cut the same way (``hidden_states_masks``).

Latents: 16 channels, 8 x 8 pixels each, patch 2 x 2. Verify and benchmark (no generate pipeline
here yet).
"""

from __future__ import annotations

from typing import Any, Mapping

from .base import Family, FamilyPreset, ParameterCount, linear
from .config_rules import Flag, Int, Ints, Number
from .plan_format import OWN, GatherOutput, SplitInput
from .rope_rules import head_width, integer

HIDREAM_PLAN = {
    # the patchified image [B, N, p*p*C] (N padded to max_resolution for a non-square image)
    "x_embedder": {"latent": SplitInput(split_dim=1, expected_dims=3)},
    # every text projection's output (T5, each Llama layer): each rank projects all, keeps its tokens
    "caption_projection.*": {0: SplitInput(split_dim=1, expected_dims=3, split_output=True, text=True)},
    # RoPE [B, N + this rank's text, 1, d/2, 2, 2]: the image rows cut as the image, the text rows kept
    "pe_embedder": {0: SplitInput(split_dim=1, expected_dims=6, split_output=True, segments=("latent", OWN))},
    # a non-square image's key mask: [B, N] in the dual-stream blocks, [B, N + text] in the single-stream ones
    "double_stream_blocks.*": {"hidden_states_masks": SplitInput(split_dim=1, expected_dims=2,
                                                                  segments=("latent",))},
    "single_stream_blocks.*": {"hidden_states_masks": SplitInput(split_dim=1, expected_dims=2,
                                                                  segments=("latent", OWN))},
    "final_layer": GatherOutput(gather_dim=1, expected_dims=3),
}

#: The Llama-3.1 layer each of the 48 blocks reads (16 dual-stream, 32 single-stream): every layer
#: to 31, then the last one repeated.
LLAMA_LAYERS = list(range(32)) + [31] * 16

#: huggingface.co/HiDream-ai/HiDream-I1-Full transformer/config.json (17B); HiDream-I1-Dev and
#: HiDream-I1-Fast (guidance-distilled: no CFG branch at their published guidance_scale 0) publish the
#: same transformer config (the values diffusers' scripts/convert_hidream_to_diffusers.py writes).
HIDREAM_I1 = {"patch_size": 2, "in_channels": 16, "out_channels": 16, "num_layers": 16, "num_single_layers": 32,
              "attention_head_dim": 128, "num_attention_heads": 20, "caption_channels": [4096, 4096],
              "text_emb_dim": 2048, "num_routed_experts": 4, "num_activated_experts": 2,
              "axes_dims_rope": [64, 32, 32], "max_resolution": [128, 128], "llama_layers": LLAMA_LAYERS}
#: HiDreamImagePipeline's max_sequence_length (128) for the T5 and the Llama prompt each: a block
#: attends to T5 + 2 Llama layers = 384 text tokens
TEXT_LEN = 3 * 128


def swiglu_width(dim: int, hidden: int, multiple_of: int = 256) -> int:
    """The inner width of HiDream's SwiGLU feed-forward for ``hidden`` (two thirds of it, rounded up
    to a multiple of 256)."""
    inner = int(2 * hidden / 3)
    return multiple_of * ((inner + multiple_of - 1) // multiple_of)


def shape(config: Mapping[str, Any]) -> dict:
    heads = integer(config, "num_attention_heads", 20)
    hd = head_width(config, "attention_head_dim", 128)
    hidden = heads * hd
    p = integer(config, "patch_size", 2)
    return {
        "attention": "joint", "depth": integer(config, "num_layers", 16),
        "single_depth": int(config.get("num_single_layers", 32)), "hidden": hidden, "num_heads": heads,
        "num_kv_heads": heads, "head_dim": hd, "ffn_dim": swiglu_width(hidden, 4 * hidden), "patch": [1, p, p],
        "in_channels": integer(config, "in_channels", 64), "vae_stride": [1, 8, 8], "text_len": TEXT_LEN,
        "text_dim": int((config.get("caption_channels") or [4096, 4096])[1]), "qk_norm": True,
    }


def count_parameters(config: Mapping[str, Any]) -> ParameterCount:
    """HiDreamImageTransformer2DModel's parameters from its config.json (diffusers 0.42.1's layers;
    the class's defaults for absent keys): the dual-stream blocks (a 12-way modulation, image and
    text q/k/v/out with RMS q/k norms over the whole width, the image's mixture-of-experts FFN: a
    gate, a shared SwiGLU expert of half the width and the routed ones; the text's SwiGLU FFN), the
    single-stream blocks (6-way modulation, the image's attention and FFN), the text projections
    (one per block and the T5's: a ``ModuleList`` as the blocks, so counted with them) and the root
    (patch, timestep and pooled-text embedders, the output layer)."""
    heads, hd = int(config.get("num_attention_heads", 20)), int(config.get("attention_head_dim", 128))
    h = heads * hd
    routed = int(config.get("num_routed_experts", 4))
    swiglu = 3 * h * swiglu_width(h, 4 * h)
    if routed > 0:
        ff_i = routed * h + 3 * h * swiglu_width(h, 2 * h) + routed * swiglu
    else:
        ff_i = swiglu
    attention = 4 * linear(h, h) + 2 * h
    single = linear(h, 6 * h) + attention + ff_i
    dual = linear(h, 12 * h) + 2 * attention + ff_i + swiglu
    depth, single_depth = int(config.get("num_layers", 16)), int(config.get("num_single_layers", 32))
    t5, llama = (config.get("caption_channels") or [4096, 4096])[:2]
    projections = (depth + single_depth) * linear(int(llama), h, False) + linear(int(t5), h, False)
    p, c_in = int(config.get("patch_size") or 1), int(config.get("in_channels", 64))
    c_out = int(config.get("out_channels") or c_in)
    te = int(config.get("text_emb_dim", 2048))
    root = (linear(256, h) + linear(h, h) + linear(te, h) + linear(h, h) + linear(c_in * p * p, h)
            + linear(h, p * p * c_out) + linear(h, 2 * h))
    largest = max(dual if depth else 0, single if single_depth else 0,
                  linear(int(llama), h, False) if depth + single_depth else 0, linear(int(t5), h, False))
    return ParameterCount(blocks=depth * dual + single_depth * single + projections, largest_block=largest, root=root)


def config_rules(config: Mapping[str, Any]):
    """The class's own rules: one Llama layer per block, RoPE axes summing to the head width."""
    layers = config.get("llama_layers")
    blocks = int(config.get("num_layers", 16)) + int(config.get("num_single_layers", 32))
    if not isinstance(layers, list) or len(layers) != blocks:
        return "llama_layers", f"{layers!r} must list one Llama layer per block ({blocks})"
    axes, hd = config.get("axes_dims_rope", [32, 32]), int(config.get("attention_head_dim", 128))
    if len(axes) != 3 or sum(axes) != hd or any(a % 2 for a in axes):
        return "axes_dims_rope", f"{list(axes)} must be 3 even numbers summing to attention_head_dim {hd}"
    caption = config.get("caption_channels")
    if not isinstance(caption, list) or len(caption) != 2:
        return "caption_channels", f"{caption!r} must be [T5 width, Llama width]"
    if config.get("num_activated_experts", 2) > config.get("num_routed_experts", 4) > 0:
        return "num_activated_experts", "must be at most num_routed_experts"
    return None


#: HiDreamImageTransformer2DModel's constructor arguments (diffusers 0.42.1) and their values.
CONFIG_KEYS = {
    "patch_size": Int(), "in_channels": Int(), "out_channels": Int(optional=True), "num_layers": Int(0),
    "num_single_layers": Int(0), "attention_head_dim": Int(), "num_attention_heads": Int(),
    "caption_channels": Ints(length=2), "text_emb_dim": Int(), "num_routed_experts": Int(0),
    "num_activated_experts": Int(), "axes_dims_rope": Ints(length=3), "max_resolution": Ints(length=2),
    "llama_layers": Ints(minimum=0), "force_inference_output": Flag(),
}

FAMILY = Family(
    name="hidream", title="HiDream-I1", classes=("HiDreamImageTransformer2DModel",), shape=shape,
    split_plans={"HiDreamImageTransformer2DModel": HIDREAM_PLAN},
    presets=(FamilyPreset("hidream-i1-full", HIDREAM_I1,
                          "huggingface.co/HiDream-ai/HiDream-I1-Full transformer/config.json (17B)",
                          parameters=ParameterCount(17_073_274_880, 424_089_600, 32_458_304)),
             FamilyPreset("hidream-i1-dev", HIDREAM_I1,
                          "huggingface.co/HiDream-ai/HiDream-I1-Dev transformer/config.json (17B)",
                          parameters=ParameterCount(17_073_274_880, 424_089_600, 32_458_304)),
             FamilyPreset("hidream-i1-fast", HIDREAM_I1,
                          "huggingface.co/HiDream-ai/HiDream-I1-Fast transformer/config.json (17B)",
                          parameters=ParameterCount(17_073_274_880, 424_089_600, 32_458_304))),
    count_parameters=count_parameters, config_keys=CONFIG_KEYS, config_rules=config_rules,
    lora_loader="HiDreamImageLoraLoaderMixin",
    step_cache=(), step_cache_refusal="the step caches are not checked on HiDream's class yet",
)
