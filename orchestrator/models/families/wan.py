"""Wan2.1 / Wan2.2 (diffusers ``WanTransformer3DModel``, which carries its own ``_cp_plan``).

Every Wan release runs the diffusers class and its pipelines: ``WanPipeline`` (text-to-video, and
Wan2.2 TI2V-5B without an image: ``expand_timesteps``), ``WanImageToVideoPipeline`` (Wan2.1 I2V
with its CLIP image encoder, Wan2.2 I2V A14B without one, TI2V-5B with ``workload.image``); Wan2.2
A14B's two experts are the pipeline's ``transformer`` / ``transformer_2`` switched at its
``boundary_ratio``. Text stays whole on every rank (cross-attention needs no communication).

The presets are the published ``transformer/config.json`` files (Wan-AI's ``*-Diffusers`` folders on
Hugging Face; the same numbers as the original releases' config.json), with the pipeline facts the
folder's ``model_index.json`` adds (boundary_ratio, expand_timesteps) and the parameters counted
from the config on the meta device (diffusers 0.42.1; tests/runtime/models/test_generic_parameters.py).
"""

from __future__ import annotations

from typing import Any, Mapping, Optional

from sporch.orchestrator.models.families.base import Family, FamilyPreset, ParameterCount, PipelineCfg, feed_forward, linear
from sporch.orchestrator.models.families.config_rules import (Flag, Int, Ints, Number, Text, head_dim_problem,
                                                              key_problem)
from sporch.orchestrator.models.checkpoint_files import CheckpointError
from sporch.orchestrator.models.families.original_format import LoraName, LoraStyle, OriginalFormat, Shapes

#: The generate workload's pipeline folder (WanPipeline): the sub-folders it reads.
PIPELINE_FOLDERS = ("text_encoder", "tokenizer", "vae", "scheduler", "transformer")

#: What every published Wan2.1 / Wan2.2 transformer config holds besides its sizes.
_COMMON = {"patch_size": [1, 2, 2], "attention_head_dim": 128, "in_channels": 16, "out_channels": 16,
           "text_dim": 4096, "freq_dim": 256, "cross_attn_norm": True, "qk_norm": "rms_norm_across_heads",
           "eps": 1e-06, "image_dim": None, "added_kv_proj_dim": None, "rope_max_seq_len": 1024}
T2V_1_3B = {**_COMMON, "num_attention_heads": 12, "ffn_dim": 8960, "num_layers": 30}
T2V_14B = {**_COMMON, "num_attention_heads": 40, "ffn_dim": 13824, "num_layers": 40}
#: image-to-video 14B (Wan2.1 480P and 720P: one architecture): 16 noise + 4 mask + 16 first-frame
#: latent channels in, 257 CLIP image tokens 1280 wide through ``image_embedder`` with their own keys
#: and values in every cross-attention
I2V_14B = {**T2V_14B, "in_channels": 36, "image_dim": 1280, "added_kv_proj_dim": 5120}
#: Wan2.2 I2V A14B: the first frame as latent condition only (no CLIP image encoder)
I2V_A14B = {**T2V_14B, "in_channels": 36}
#: Wan2.2 TI2V-5B: 48 latent channels from the Wan2.2 VAE (strides 4 x 16 x 16)
TI2V_5B = {**_COMMON, "num_attention_heads": 24, "ffn_dim": 14336, "num_layers": 30, "in_channels": 48,
           "out_channels": 48}
#: The test model: seconds on 4 CPU ranks (examples/tiny.yaml); its pipeline is built locally
#: (runtime/models/families/wan.py ``tiny_pipeline``), never downloaded.
TINY = {**_COMMON, "attention_head_dim": 16, "in_channels": 4, "out_channels": 4, "text_dim": 32,
        "num_attention_heads": 4, "ffn_dim": 128, "num_layers": 2}

_HF = "huggingface.co/Wan-AI/{}-Diffusers transformer/config.json"
PRESETS = (
    FamilyPreset("wan2.1-t2v-1.3b", T2V_1_3B, _HF.format("Wan2.1-T2V-1.3B"),
                 parameters=ParameterCount(1_393_221_120, 46_440_704, 25_775_680)),
    FamilyPreset("wan2.1-t2v-14b", T2V_14B, _HF.format("Wan2.1-T2V-14B"),
                 parameters=ParameterCount(14_055_772_160, 351_394_304, 232_719_424)),
    # two releases of one architecture, trained on 480 x 832 and 720 x 1280 videos (flow_shift 3 and 5 in
    # their scheduler folders)
    FamilyPreset("wan2.1-i2v-14b-480p", I2V_14B, _HF.format("Wan2.1-I2V-14B-480P"),
                 parameters=ParameterCount(16_153_538_560, 403_838_464, 241_340_224)),
    FamilyPreset("wan2.1-i2v-14b-720p", I2V_14B, _HF.format("Wan2.1-I2V-14B-720P"),
                 parameters=ParameterCount(16_153_538_560, 403_838_464, 241_340_224)),
    # both experts have the Wan2.1-14B config; the boundary is model_index.json's boundary_ratio
    FamilyPreset("wan2.2-t2v-a14b", T2V_14B, _HF.format("Wan2.2-T2V-A14B") + " (both experts), model_index.json",
                 parameters=ParameterCount(14_055_772_160, 351_394_304, 232_719_424), boundary_ratio=0.875),
    FamilyPreset("wan2.2-i2v-a14b", I2V_A14B, _HF.format("Wan2.2-I2V-A14B") + " (both experts), model_index.json",
                 parameters=ParameterCount(14_055_772_160, 351_394_304, 233_129_024), boundary_ratio=0.9),
    # one timestep per token (model_index.json's expand_timesteps): text- or image-to-video with one transformer
    FamilyPreset("wan2.2-ti2v-5b", TI2V_5B, _HF.format("Wan2.2-TI2V-5B") + ", model_index.json",
                 parameters=ParameterCount(4_909_701_120, 163_656_704, 90_086_592), expand_timesteps=True,
                 shape_overrides={"vae_stride": [4, 16, 16]}),
    FamilyPreset("tiny", TINY, "sporch's test model (a tiny WanTransformer3DModel config, random weights)",
                 shape_overrides={"text_len": 8}, test_model=True),
)

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
#: CLIP ViT-H/14's tokens at 224 px: 16 x 16 patches and the class token (WanImageToVideoPipeline feeds
#: the penultimate hidden states, all of them, to the transformer's image embedder)
IMAGE_TOKENS = 257
#: their width (the transformer's ``image_dim``)
CLIP_WIDTH = 1280


def pipeline_parts(preset: Optional[str]) -> Optional[Mapping[str, Any]]:
    """The published text encoder, VAE (and image encoder) of preset ``preset``; None for a
    preset whose parts sporch does not know (or a checkpoint folder without one)."""
    name = preset or ""
    if name.startswith(("wan2.1-t2v", "wan2.2-t2v-a14b", "wan2.2-i2v-a14b")):
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


def _patch(value: Any) -> list:
    return [int(p) for p in value] if isinstance(value, (list, tuple)) else [1, int(value), int(value)]


def shape(config: Mapping[str, Any]) -> dict:
    heads, hd = int(config.get("num_attention_heads", 40)), int(config.get("attention_head_dim", 128))
    return {
        "attention": "cross", "depth": int(config.get("num_layers", 40)), "single_depth": 0,
        "hidden": heads * hd, "num_heads": heads, "num_kv_heads": heads, "head_dim": hd,
        "ffn_dim": int(config.get("ffn_dim", 13824)), "patch": _patch(config.get("patch_size", (1, 2, 2))),
        "in_channels": int(config.get("in_channels", 16)), "vae_stride": [4, 8, 8], "text_len": 512,
        "text_dim": int(config.get("text_dim", 4096)), "qk_norm": bool(config.get("qk_norm")),
    }


def config_for(base: Mapping[str, Any], model: Mapping[str, Any]) -> dict:
    """A WanTransformer3DModel config with ``model``'s shape (``plan.model`` fields) on top of
    ``base`` (a preset's config, or {} for a model given by its shape alone: the class's published
    defaults). What the class cannot express (another attention kind, single-stream blocks,
    grouped keys) is caught by comparing :func:`shape` of the result with ``model``."""
    out = {**_COMMON, **dict(base)}
    image = out.get("added_kv_proj_dim") is not None
    same_channels = out.get("out_channels") in (None, out.get("in_channels"))
    hidden = int(model["num_heads"]) * int(model["head_dim"])
    out.update(num_attention_heads=int(model["num_heads"]), attention_head_dim=int(model["head_dim"]),
               num_layers=int(model["depth"]), ffn_dim=int(model["ffn_dim"]), in_channels=int(model["in_channels"]),
               text_dim=int(model["text_dim"]), patch_size=[int(p) for p in model["patch"]],
               qk_norm="rms_norm_across_heads" if model.get("qk_norm") else None)
    if same_channels:
        out["out_channels"] = out["in_channels"]
    if image:
        out["added_kv_proj_dim"] = hidden
    return out


#: WanTransformer3DModel's constructor arguments (diffusers 0.42.1) and their values.
CONFIG_KEYS = {
    "patch_size": Ints(3), "num_attention_heads": Int(), "attention_head_dim": Int(2), "in_channels": Int(),
    "out_channels": Int(optional=True), "text_dim": Int(), "freq_dim": Int(2), "ffn_dim": Int(), "num_layers": Int(),
    "cross_attn_norm": Flag(), "qk_norm": Text("rms_norm_across_heads", None), "eps": Number(0, 1, open_min=True),
    "image_dim": Int(optional=True), "added_kv_proj_dim": Int(optional=True), "rope_max_seq_len": Int(),
    "pos_embed_seq_len": Int(optional=True)}


def config_rules(config: Mapping[str, Any]) -> Optional[tuple[str, str]]:
    """The class's rules across keys: an even head width (3-D RoPE rotates channel pairs), image
    keys and values as wide as the model (``added_kv_proj_dim``) exactly when it takes image tokens."""
    problem = head_dim_problem(config, default=128)
    if problem is not None:
        return problem
    image, kv = config.get("image_dim"), config.get("added_kv_proj_dim")
    if (image is None) != (kv is None):
        return "added_kv_proj_dim", (f"{kv!r} with image_dim {image!r}: a model that attends to image tokens sets both "
                                     "(image_dim: their width; added_kv_proj_dim: the model's), one without sets neither")
    hidden = int(config.get("num_attention_heads", 40)) * int(config.get("attention_head_dim", 128))
    if kv is not None and kv != hidden:
        return "added_kv_proj_dim", f"{kv} must be num_attention_heads x attention_head_dim = {hidden}"
    return None


#: The original release's config.json (Wan-Video/Wan2.1 and Wan2.2 ``WanModel``): what each key must
#: be, and the defaults of ``WanModel.__init__`` for those a config leaves out.
ORIGINAL_KEYS = {
    "dim": Int(), "num_heads": Int(), "num_layers": Int(), "ffn_dim": Int(), "in_dim": Int(), "out_dim": Int(),
    "freq_dim": Int(2), "text_dim": Int(), "text_len": Int(), "patch_size": Ints(3), "eps": Number(0, 1, open_min=True),
    "qk_norm": Flag(), "cross_attn_norm": Flag(), "window_size": Ints(2, minimum=-1)}
ORIGINAL_CONFIG = {"model_type": "t2v", "patch_size": (1, 2, 2), "text_len": 512, "in_dim": 16, "dim": 2048,
                   "ffn_dim": 8192, "freq_dim": 256, "text_dim": 4096, "out_dim": 16, "num_heads": 16,
                   "num_layers": 32, "window_size": (-1, -1), "qk_norm": True, "cross_attn_norm": True,
                   "eps": 1e-6}
#: the model types whose checkpoints diffusers' converter maps into ``WanTransformer3DModel`` (text-,
#: image- and text-image-to-video; not FLF2V's learned image position embedding, VACE's or S2V's blocks)
ORIGINAL_MODEL_TYPES = ("t2v", "i2v", "ti2v")
#: what the shapes cannot tell (the heads) or a default would guess wrong: the config must say it
ORIGINAL_REQUIRED = ("dim", "num_heads", "num_layers", "ffn_dim")
#: RoPE length of the released model (``WanModel`` tabulates 1024 positions; diffusers' default)
ORIGINAL_ROPE_LEN = 1024


def is_original_config(config: Mapping[str, Any]) -> bool:
    """An original release's config (``WanModel``, or no class with its ``dim`` / ``num_heads``)."""
    cls = config.get("_class_name")
    return cls == "WanModel" or (not cls and {"dim", "num_heads", "num_layers"} <= set(config))


def original_config_problem(config: Mapping[str, Any]) -> Optional[tuple[str, str]]:
    """(key, why) for an original config diffusers' class cannot take, else None."""
    problem = key_problem(ORIGINAL_KEYS, config, "WanModel (original release)")
    if problem is not None:
        return problem
    lacking = [k for k in ORIGINAL_REQUIRED if k not in config]
    if lacking:
        return lacking[0], "is not given (an original Wan config.json states dim, num_heads, num_layers and ffn_dim)"
    kind = config.get("model_type", "t2v")
    if kind not in ORIGINAL_MODEL_TYPES:
        return "model_type", (f"{kind!r} is not loadable (diffusers' WanTransformer3DModel takes "
                              f"{', '.join(ORIGINAL_MODEL_TYPES)}); use its diffusers release")
    if config["dim"] % config["num_heads"]:
        return "num_heads", f"{config['num_heads']} must divide dim {config['dim']} (dim = num_heads x head width)"
    if list(config.get("window_size", (-1, -1))) != [-1, -1]:
        return "window_size", f"{config['window_size']!r} (local attention) is not computed: diffusers' class attends globally"
    return None


def diffusers_config_from_original(config: Mapping[str, Any], shapes: Shapes) -> dict:
    """The ``WanTransformer3DModel`` config of an original-release checkpoint: its config.json
    (``WanModel``'s keys) and its tensors' ``shapes`` (without prefix), which say whether it has the
    CLIP image input (Wan2.1 I2V: ``img_emb``; Wan2.2's I2V A14B, also ``model_type: i2v``, has
    none; without shapes, the model type says). ``text_len`` is the text encoder's length, not a
    key of the class. A key or value the class cannot express is a one-line CheckpointError."""
    problem = original_config_problem(config)
    if problem is not None:
        raise CheckpointError(f"{problem[0]}: {problem[1]}")
    if "img_emb.emb_pos" in shapes:
        raise CheckpointError("img_emb.emb_pos: the checkpoint is a first-last-frame model; use its diffusers release")
    c = {**ORIGINAL_CONFIG, **dict(config)}
    dim, heads = int(c["dim"]), int(c["num_heads"])
    image = shapes.get("img_emb.proj.0.weight")
    image_dim = int(image[0]) if image else (CLIP_WIDTH if not shapes and c["model_type"] == "i2v" else None)
    return {
        "_class_name": "WanTransformer3DModel", "patch_size": list(c["patch_size"]),
        "num_attention_heads": heads, "attention_head_dim": dim // heads, "in_channels": int(c["in_dim"]),
        "out_channels": int(c["out_dim"]), "text_dim": int(c["text_dim"]), "freq_dim": int(c["freq_dim"]),
        "ffn_dim": int(c["ffn_dim"]), "num_layers": int(c["num_layers"]), "cross_attn_norm": bool(c["cross_attn_norm"]),
        "qk_norm": "rms_norm_across_heads" if c["qk_norm"] else None, "eps": float(c["eps"]),
        "image_dim": image_dim, "added_kv_proj_dim": dim if image_dim else None,
        "rope_max_seq_len": ORIGINAL_ROPE_LEN, "pos_embed_seq_len": None,
    }


def count_parameters(config: Mapping[str, Any]) -> ParameterCount:
    """WanTransformer3DModel's parameters from its config.json (diffusers 0.42.1's layers; the class's
    defaults for absent keys): blocks (self-attention and cross-attention, each q/k/v/out projections
    with RMS q/k norms across heads; the image keys and values where the model takes CLIP tokens; the
    cross-attention norm; the feed-forward; a 6-way scale/shift table) and the root (patch embedding,
    time and text embedders, the time projection, the image embedder, the output projection and its
    2-way table)."""
    c = {**_COMMON, "num_attention_heads": 40, "ffn_dim": 13824, "num_layers": 40, **dict(config)}
    h = int(c["num_attention_heads"]) * int(c["attention_head_dim"])
    qk = 2 * h if c.get("qk_norm") else 0
    attention = 4 * linear(h, h) + qk
    kv, image = c.get("added_kv_proj_dim"), c.get("image_dim")
    cross = attention + (2 * linear(int(kv), h) + h if kv else 0)
    block = attention + cross + (2 * h if c.get("cross_attn_norm") else 0) + feed_forward(h, int(c["ffn_dim"])) + 6 * h
    pt, ph, pw = _patch(c["patch_size"])
    c_in, c_out = int(c["in_channels"]), int(c.get("out_channels") or c["in_channels"])
    root = (c_in * pt * ph * pw * h + h + linear(int(c["freq_dim"]), h) + linear(h, h) + linear(h, 6 * h)
            + linear(int(c["text_dim"]), h) + linear(h, h) + linear(h, c_out * pt * ph * pw) + 2 * h)
    if image:
        d = int(image)
        root += 2 * d + linear(d, d) + linear(d, h) + 2 * h + (int(c["pos_embed_seq_len"]) * d
                                                                 if c.get("pos_embed_seq_len") else 0)
    depth = int(c["num_layers"])
    return ParameterCount(blocks=depth * block, largest_block=block if depth else 0, root=root)


def image_tokens(config: Mapping[str, Any]) -> tuple[int, int]:
    """(width, count) of the CLIP image tokens a Wan2.1 I2V transformer attends to beside the text
    (``image_dim``), (0, 0) for the others."""
    dim = config.get("image_dim")
    return (int(dim), IMAGE_TOKENS) if dim else (0, 0)


def image_input(config: Mapping[str, Any], expand_timesteps: bool) -> str:
    """Image-to-video (more input than output channels: the first frame as latent condition) needs
    ``workload.image``; Wan2.2 TI2V-5B (one timestep per token) takes one or none; T2V none."""
    c_in = int(config.get("in_channels", 16))
    if c_in > int(config.get("out_channels") or c_in):
        return "required"
    return "optional" if expand_timesteps else "none"


def image_folders(config: Mapping[str, Any]) -> tuple[str, ...]:
    """Wan2.1 I2V reads the image as CLIP tokens too: the folder's image encoder and its processor."""
    return ("image_encoder", "image_processor") if config.get("image_dim") else ()


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


def _block(original: str, diffusers: str, when: str | None = None) -> LoraName:
    return LoraName(f"blocks.{{i}}.{original}", (f"blocks.{{i}}.{diffusers}",), blocks="num_layers", when=when)


#: WanTransformer3DModel's linear modules and WanModel's names for them (Wan-Video/Wan2.1
#: ``wan/modules/model.py``).
LORA_NAMES = (
    *(_block(f"{attn}.{o}", f"{theirs}.{d}") for attn, theirs in (("self_attn", "attn1"), ("cross_attn", "attn2"))
      for o, d in (("q", "to_q"), ("k", "to_k"), ("v", "to_v"), ("o", "to_out.0"))),
    _block("cross_attn.k_img", "attn2.add_k_proj", "added_kv_proj_dim"),
    _block("cross_attn.v_img", "attn2.add_v_proj", "added_kv_proj_dim"),
    _block("ffn.0", "ffn.net.0.proj"), _block("ffn.2", "ffn.net.2"),
    LoraName("text_embedding.0", ("condition_embedder.text_embedder.linear_1",)),
    LoraName("text_embedding.2", ("condition_embedder.text_embedder.linear_2",)),
    LoraName("time_embedding.0", ("condition_embedder.time_embedder.linear_1",)),
    LoraName("time_embedding.2", ("condition_embedder.time_embedder.linear_2",)),
    LoraName("time_projection.1", ("condition_embedder.time_proj",)),
    LoraName("img_emb.proj.1", ("condition_embedder.image_embedder.ff.net.0.proj",), when="image_dim"),
    LoraName("img_emb.proj.3", ("condition_embedder.image_embedder.ff.net.2",), when="image_dim"),
    LoraName("head.head", ("proj_out",)),
)
#: WanModel's other parameters (norms, modulation tables, the patch embedding): what LightX2V's
#: whole-tensor differences change besides linears (``blocks.{i}.diff_m`` is a block's modulation).
DELTA_PARAMETERS = (
    LoraName("patch_embedding.weight", ()), LoraName("patch_embedding.bias", ()),
    *(LoraName(f"blocks.{{i}}.{p}", (), blocks="num_layers") for p in (
        "modulation", "norm3.weight", "norm3.bias", "self_attn.norm_q.weight", "self_attn.norm_k.weight",
        "cross_attn.norm_q.weight", "cross_attn.norm_k.weight")),
    LoraName("blocks.{i}.cross_attn.norm_k_img.weight", (), blocks="num_layers", when="added_kv_proj_dim"),
    LoraName("head.modulation", ()),
    *(LoraName(f"img_emb.proj.{k}.{leaf}", (), when="image_dim") for k in (0, 4) for leaf in ("weight", "bias")),
)


def lora_check(names: list) -> str | None:
    """What diffusers' Wan LoRA converter (``_convert_non_diffusers_wan_lora_to_diffusers``) needs of
    an adapter in WanModel's names: a block module (it numbers the blocks from them), and image keys
    k_img and v_img together (it reads either only when both are there)."""
    if names and not any(n.startswith("blocks.") for n in names):
        return "diffusers' Wan LoRA converter needs at least one module of a block (blocks.<i>.*)"
    image = {n.rsplit(".", 1)[-1] for n in names if n.endswith((".cross_attn.k_img", ".cross_attn.v_img"))}
    if len(image) == 1:
        have = image.pop()
        return (f"diffusers' Wan LoRA converter reads cross_attn.{have} only beside "
                f"cross_attn.{'v_img' if have == 'k_img' else 'k_img'}")
    return None


#: Wan-Video's ``WanModel`` checkpoints (Wan2.1 / Wan2.2 repositories, ComfyUI's repackaged
#: ``model.diffusion_model.`` files), by ``head.modulation`` (diffusers' own marker for them).
ORIGINAL = OriginalFormat(release="Wan-Video (WanModel)", class_name="WanTransformer3DModel",
                          markers=("head.modulation",), converter="convert_wan_transformer_to_diffusers",
                          diffusers_config=diffusers_config_from_original, is_config=is_original_config,
                          lora_names=LORA_NAMES,
                          lora_style=LoraStyle("diffusion_model.", underscored=False), lora_check=lora_check,
                          delta_parameters=DELTA_PARAMETERS)


FAMILY = Family(name="wan", title="Wan2.1 / Wan2.2", classes=("WanTransformer3DModel",), shape=shape,
                config_for=config_for, presets=PRESETS, lora_loader="WanLoraLoaderMixin", text_split=False,
                pipeline_folders=PIPELINE_FOLDERS, video=True, pipeline_class="WanPipeline",
                image_pipeline_class="WanImageToVideoPipeline", image_input=image_input, image_folders=image_folders,
                pipeline_cfg=PipelineCfg.TWO_CALLS,  # "cond" then "uncond" per step, one per cfg rank
                pipeline_parts=pipeline_parts, vae_stride_from=vae_stride, vae_class="AutoencoderKLWan",
                vae_tiling=True, vae_parallel=True, image_tokens=image_tokens, config_keys=CONFIG_KEYS,
                count_parameters=count_parameters,
                config_rules=config_rules, original=ORIGINAL, teacache_coefficients=TEACACHE_COEFFICIENTS)
