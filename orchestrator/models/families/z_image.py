"""Z-Image (diffusers ``ZImageTransformer2DModel``: no ``_cp_plan``; sporch ships its split plan).

A single-stream DiT: the image tokens (patch 2 x 2) and the Qwen3 caption tokens are each padded to a
multiple of 32 with a learned pad token (which attention does not mask), refined apart (the noise
refiner, modulated by the timestep; the context refiner), then joined as one sequence [image, caption]
with one 3-D RoPE table for the main blocks. The plan cuts that joint sequence, its RoPE table and its
key mask (a batch of unequal captions) at the main blocks, and gathers after the final layer; both
refiners run whole on every rank (they run before the split). The derivation cannot find this cut:
no block input is as long as the image's tokens, or the image's and the caption's together (the
padding), so the table is shipped and checked exact on gloo ranks
(tests/runtime/models/test_skyreels_zimage.py).

Generate runs diffusers' ``ZImagePipeline``: Qwen3 caption states (the prompt's tokens only, a list of
unequal lengths), one batched transformer call per step holding both CFG passes ([prompt, negative]:
``parallel.cfg=2`` computes one list entry on each cfg rank), its output a list of per-sample latents.
Its guidance counts from 0 (``pos + g (pos - neg)``: CFG runs for any g > 0), sporch's from 1, so a
scale in (0, 1] is refused for generate in one line (``Family.cfg_from_zero``); Z-Image-Turbo's is 0.

Z-Image-Turbo has 30 heads: Ulysses 4 (and 8) does not divide them; sporch's uneven heads run it.
"""

from __future__ import annotations

from typing import Any, Mapping, Optional

from .base import Family, FamilyPreset, ParameterCount, PipelineCfg, linear
from .config_rules import Flag, Int, Ints, Number
from .plan_format import GatherOutput, SplitInput

#: huggingface.co/Tongyi-MAI/Z-Image-Turbo transformer/config.json (6.15B)
Z_IMAGE_TURBO = {"all_f_patch_size": [1], "all_patch_size": [2], "axes_dims": [32, 48, 48],
                 "axes_lens": [1536, 512, 512], "cap_feat_dim": 2560, "dim": 3840, "in_channels": 16, "n_heads": 30,
                 "n_kv_heads": 30, "n_layers": 30, "n_refiner_layers": 2, "norm_eps": 1e-05, "qk_norm": True,
                 "rope_theta": 256.0, "t_scale": 1000.0}
#: the pipeline's max_sequence_length (ZImagePipeline: Qwen3 prompt tokens)
TEXT_LEN = 512
#: image and caption are each padded to a multiple of this before the blocks (diffusers' SEQ_MULTI_OF)
SEQ_MULTIPLE = 32
#: the timestep embedding's width cap (diffusers' ADALN_EMBED_DIM) and its MLP's middle width
ADALN, T_MID = 256, 1024

_JOINT = SplitInput(split_dim=1, expected_dims=3, text=True)
#: [image, caption] cut at the main blocks (``x``), with its RoPE table (``freqs_cis``, complex) and key
#: mask (``attn_mask`` [B, L]: present only for a batch of unequal lengths) at every block; gathered
#: after the final layer (per token: LayerNorm, the timestep's scale, a linear)
Z_IMAGE_PLAN = {
    "layers.0": {"x": _JOINT},
    "layers.*": {"attn_mask": SplitInput(split_dim=1, expected_dims=2, text=True), "freqs_cis": _JOINT},
    "all_final_layer.*": GatherOutput(gather_dim=1, expected_dims=3),
}


#: The generate workload's pipeline folder (ZImagePipeline: Qwen3 text encoder and its tokenizer).
PIPELINE_FOLDERS = ("text_encoder", "tokenizer", "vae", "scheduler", "transformer")

#: The published pipeline's other parts (plan/pipeline_estimate.py's memory estimate; keys as wan.PARTS),
#: huggingface.co/Tongyi-MAI/Z-Image-Turbo: model_index.json's text_encoder ``Qwen3Model`` with
#: text_encoder/config.json Qwen3-4B (36 layers x 2560, 32 heads of 128, 8 KV heads, FFN 9728, vocabulary
#: 151936, tied embeddings), vae/ FLUX.1's AutoencoderKL (16 latent channels, block_out_channels
#: [128, 256, 512, 512], 2 layers per block, no quant convs, scaling 0.3611, shift 0.1159, sample_size 1024:
#: the counts of lumina2.PARTS). Qwen3Model counted with that config on the meta device (transformers 5.x).
PARTS: dict[str, Any] = {
    "text_encoder": "Qwen3-4B (Qwen3Model)", "text_encoder_parameters": 4_022_468_096, "text_encoder_layers": 36,
    "text_encoder_embedding": 151_936 * 2560, "text_encoder_layer": 100_930_816,
    "vae": "AutoencoderKL (FLUX.1's, 16 channels)", "vae_parameters": 83_819_683, "vae_channels": 128,
    "vae_chunk_frames": 1, "vae_tile_pixels": 1024 * 1024}


def pipeline_parts(preset: Optional[str]) -> Optional[Mapping[str, Any]]:
    """The published Z-Image-Turbo pipeline's text encoder and VAE (its one preset)."""
    return PARTS if preset == "z-image-turbo" else None


def generate_refusal(config: Mapping[str, Any]) -> Optional[str]:
    """The Omni variant (``siglip_feat_dim``) runs in ZImageOmniPipeline, which generate does not build."""
    if config.get("siglip_feat_dim"):
        return "siglip_feat_dim (Z-Image Omni) runs in ZImageOmniPipeline, which generate does not build"
    return None


def ffn_width(dim: int) -> int:
    """The blocks' gated feed-forward width (diffusers: ``int(dim / 3 * 8)``)."""
    return int(dim / 3 * 8)


def shape(config: Mapping[str, Any]) -> dict:
    dim, heads = int(config.get("dim", 3840)), int(config.get("n_heads", 30))
    if dim % heads:
        raise ValueError(f"dim {dim} must be a multiple of n_heads {heads}")
    p = int(list(config.get("all_patch_size", [2]))[0])
    pf = int(list(config.get("all_f_patch_size", [1]))[0])
    return {
        "attention": "joint", "depth": int(config.get("n_layers", 30)), "single_depth": 0, "hidden": dim,
        "num_heads": heads, "num_kv_heads": heads, "head_dim": dim // heads, "ffn_dim": ffn_width(dim),
        "patch": [pf, p, p], "in_channels": int(config.get("in_channels", 16)), "vae_stride": [1, 8, 8],
        "text_len": TEXT_LEN, "text_dim": int(config.get("cap_feat_dim", 2560)),
        "qk_norm": bool(config.get("qk_norm", True)),
    }


def count_parameters(config: Mapping[str, Any]) -> ParameterCount:
    """ZImageTransformer2DModel's parameters from its config.json (diffusers 0.42.1's layers; the class's
    defaults for absent keys): blocks of its block lists (attention without biases and with RMS q/k norms
    when ``qk_norm``, the gated feed-forward, four RMS norms; the noise refiner's and main blocks' timestep
    modulation, the context (and SigLIP) refiners' none) and the root (an embedder and a final layer per
    patch size, the timestep MLP, the caption embedder, the pad tokens; ``n_kv_heads`` builds nothing)."""
    dim, heads = int(config.get("dim", 3840)), int(config.get("n_heads", 30))
    hd, t = dim // heads, min(dim, ADALN)
    plain = 4 * dim * dim + (2 * hd if config.get("qk_norm", True) else 0) + 3 * dim * ffn_width(dim) + 4 * dim
    modulated = plain + linear(t, 4 * dim)
    c_in, cap = int(config.get("in_channels", 16)), int(config.get("cap_feat_dim", 2560))
    root = linear(256, T_MID) + linear(T_MID, t) + cap + linear(cap, dim) + 2 * dim
    for p, pf in zip(config.get("all_patch_size", [2]), config.get("all_f_patch_size", [1])):
        tokens = int(pf) * int(p) * int(p)
        root += linear(tokens * c_in, dim) + linear(dim, tokens * c_in) + linear(t, dim)
    siglip = config.get("siglip_feat_dim")
    refiners, depth = int(config.get("n_refiner_layers", 2)), int(config.get("n_layers", 30))
    blocks = (depth + refiners) * modulated + refiners * plain
    if siglip:
        root += int(siglip) + linear(int(siglip), dim) + dim
        blocks += refiners * plain
    return ParameterCount(blocks=blocks, largest_block=modulated if depth + refiners else plain, root=root)


#: ZImageTransformer2DModel's constructor arguments (diffusers 0.42.1) and their values
CONFIG_KEYS = {
    "all_patch_size": Ints(), "all_f_patch_size": Ints(), "in_channels": Int(), "dim": Int(), "n_layers": Int(),
    "n_refiner_layers": Int(0), "n_heads": Int(), "n_kv_heads": Int(), "norm_eps": Number(0, 1, open_min=True),
    "qk_norm": Flag(), "cap_feat_dim": Int(), "siglip_feat_dim": Int(optional=True),
    "rope_theta": Number(0, open_min=True), "t_scale": Number(0, open_min=True), "axes_dims": Ints(3),
    "axes_lens": Ints(3)}


def config_rules(config: Mapping[str, Any]) -> Optional[tuple[str, str]]:
    """The class's rules across keys: one temporal patch size per spatial one, heads dividing the
    width, RoPE axes of even widths summing to the head width."""
    ps, fs = list(config.get("all_patch_size", [2])), list(config.get("all_f_patch_size", [1]))
    if len(ps) != len(fs):
        return "all_f_patch_size", f"{fs} must list one size per all_patch_size entry {ps}"
    dim, heads = int(config.get("dim", 3840)), int(config.get("n_heads", 30))
    if dim % heads:
        return "n_heads", f"{heads} must divide dim {dim}"
    axes = list(config.get("axes_dims", [32, 48, 48]))
    if sum(axes) != dim // heads or any(a % 2 for a in axes):
        return "axes_dims", f"{axes} must be even numbers summing to dim / n_heads {dim // heads}"
    return None


def split_refusal(config: Mapping[str, Any]) -> Optional[str]:
    """The SigLIP refiner (Z-Image Omni) joins a third stream the table does not name."""
    if config.get("siglip_feat_dim"):
        return "siglip_feat_dim: the Omni variant's image-condition stream is not in the shipped split plan"
    return None


FAMILY = Family(
    name="z-image", title="Z-Image", classes=("ZImageTransformer2DModel",), shape=shape,
    split_plans={"ZImageTransformer2DModel": Z_IMAGE_PLAN},
    local_attention=("noise_refiner", "context_refiner", "siglip_refiner"),
    presets=(FamilyPreset("z-image-turbo", Z_IMAGE_TURBO,
                          "huggingface.co/Tongyi-MAI/Z-Image-Turbo transformer/config.json (6.15B)",
                          parameters=ParameterCount(6_143_056_384, 180_910_336, 11_852_352)),),
    count_parameters=count_parameters, config_keys=CONFIG_KEYS, config_rules=config_rules,
    split_refusal=split_refusal, lora_loader="ZImageLoraLoaderMixin", step_cache=(),
    pipeline_folders=PIPELINE_FOLDERS, pipeline_class="ZImagePipeline", pipeline_parts=pipeline_parts,
    pipeline_cfg=PipelineCfg.BATCHED,  # one call per step on [prompt, negative]: one list entry per cfg rank
    generate_refusal=generate_refusal, cfg_from_zero=True,
    vae_tiling=True, vae_class="AutoencoderKL", vae_parallel=True,  # FLUX.1's AutoencoderKL, as Lumina 2's
    step_cache_refusal="the step caches are not checked on Z-Image's class yet (its blocks take positional inputs)",
)
