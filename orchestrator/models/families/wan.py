"""Wan2.1 / Wan2.2 (diffusers ``WanTransformer3DModel``, which carries its own ``_cp_plan``).

sporch also runs Wan on its hand-built path (``runtime/model/wan.py``; presets, checkpoint tables and
knobs in ``models/wan.py``); the generic path runs the diffusers class itself. Text stays
whole on every rank (cross-attention needs no communication).
"""

from __future__ import annotations

from typing import Any, Mapping, Optional

from sporch.orchestrator.models.checkpoint_files import CheckpointError
from sporch.orchestrator.models.families.base import Family
from sporch.orchestrator.models.families.original_format import LoraName, LoraStyle, OriginalFormat, Shapes

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


#: The original release's config.json (Wan-Video/Wan2.1 and Wan2.2 ``WanModel``): its keys with the
#: defaults of ``WanModel.__init__``, and the model types whose checkpoints diffusers' converter maps
#: into ``WanTransformer3DModel`` (text-, image- and text-image-to-video; not FLF2V's learned image
#: position embedding, VACE's or S2V's extra blocks).
ORIGINAL_CONFIG = {"model_type": "t2v", "patch_size": (1, 2, 2), "text_len": 512, "in_dim": 16, "dim": 2048,
                   "ffn_dim": 8192, "freq_dim": 256, "text_dim": 4096, "out_dim": 16, "num_heads": 16,
                   "num_layers": 32, "window_size": (-1, -1), "qk_norm": True, "cross_attn_norm": True,
                   "eps": 1e-6}
ORIGINAL_MODEL_TYPES = ("t2v", "i2v", "ti2v")
#: what the shapes cannot tell (the heads) or a default would guess wrong: the config must say it
ORIGINAL_REQUIRED = ("dim", "num_heads", "num_layers", "ffn_dim")
#: config.json keys of no effect on the weights (the release's bookkeeping)
ORIGINAL_BOOKKEEPING = ("__module__", "architectures")
#: RoPE length of the released model (``WanModel`` tabulates 1024 positions; diffusers' default)
ORIGINAL_ROPE_LEN = 1024


def _positive(config: Mapping[str, Any], key: str, where: str) -> int:
    value = config.get(key, ORIGINAL_CONFIG[key])
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise CheckpointError(f"{where}: {key}={value!r} must be a positive integer")
    return value


def diffusers_config_from_original(config: Mapping[str, Any], shapes: Shapes) -> dict:
    """The ``WanTransformer3DModel`` config of an original-release checkpoint: its config.json
    (``WanModel``'s keys: dim, num_heads, num_layers, ffn_dim, in_dim, out_dim, freq_dim,
    text_dim, patch_size, eps, qk_norm, cross_attn_norm, window_size, model_type, text_len) and
    its tensors' ``shapes`` (without prefix), which say whether it has the CLIP image input (Wan2.1
    I2V: ``img_emb``; Wan2.2's I2V A14B, also ``model_type: i2v``, has none). ``text_len`` is the
    text encoder's length, not a key of the class. A key or value the class cannot express is a
    one-line CheckpointError naming it."""
    where = "the original Wan config.json"
    unknown = sorted(k for k in config if k not in ORIGINAL_CONFIG and not k.startswith("_")
                     and k not in ORIGINAL_BOOKKEEPING)
    if unknown:
        raise CheckpointError(f"{where}: key {unknown[0]!r} is not one of WanModel's; it may change the computation, "
                              "so the checkpoint is refused" + (f" (also: {', '.join(unknown[1:])})" if unknown[1:] else ""))
    lacking = [k for k in ORIGINAL_REQUIRED if k not in config]
    if lacking:
        raise CheckpointError(f"{where} does not say {', '.join(lacking)} (an original Wan checkpoint needs its "
                              "config.json, or name the model's preset)")
    kind = config.get("model_type", "t2v")
    if kind not in ORIGINAL_MODEL_TYPES:
        raise CheckpointError(f"{where}: model_type {kind!r} is not loadable (diffusers' WanTransformer3DModel takes "
                              f"{', '.join(ORIGINAL_MODEL_TYPES)}); use its diffusers release")
    dim, heads = _positive(config, "dim", where), _positive(config, "num_heads", where)
    if dim % heads:
        raise CheckpointError(f"{where}: num_heads {heads} must divide dim {dim} (dim = num_heads x head_dim)")
    window = config.get("window_size", ORIGINAL_CONFIG["window_size"])
    if list(window or ()) != [-1, -1]:
        raise CheckpointError(f"{where}: window_size={window!r}; WanTransformer3DModel attends globally "
                              "(window_size [-1, -1])")
    for key in ("qk_norm", "cross_attn_norm"):
        if not isinstance(config.get(key, True), bool):
            raise CheckpointError(f"{where}: {key}={config[key]!r} must be true or false")
    patch = config.get("patch_size", ORIGINAL_CONFIG["patch_size"])
    image = shapes.get("img_emb.proj.0.weight")
    if "img_emb.emb_pos" in shapes:
        raise CheckpointError(f"{where}: the checkpoint has img_emb.emb_pos (a first-last-frame model); use its "
                              "diffusers release")
    return {
        "_class_name": "WanTransformer3DModel",
        "patch_size": list(patch) if isinstance(patch, (list, tuple)) else patch,
        "num_attention_heads": heads, "attention_head_dim": dim // heads,
        "in_channels": _positive(config, "in_dim", where), "out_channels": _positive(config, "out_dim", where),
        "text_dim": _positive(config, "text_dim", where), "freq_dim": _positive(config, "freq_dim", where),
        "ffn_dim": _positive(config, "ffn_dim", where), "num_layers": _positive(config, "num_layers", where),
        "cross_attn_norm": config.get("cross_attn_norm", True),
        "qk_norm": "rms_norm_across_heads" if config.get("qk_norm", True) else None,
        "eps": config.get("eps", ORIGINAL_CONFIG["eps"]),
        "image_dim": int(image[0]) if image else None, "added_kv_proj_dim": dim if image else None,
        "rope_max_seq_len": ORIGINAL_ROPE_LEN, "pos_embed_seq_len": None,
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
                          diffusers_config=diffusers_config_from_original, lora_names=LORA_NAMES,
                          lora_style=LoraStyle("diffusion_model.", underscored=False), lora_check=lora_check,
                          delta_parameters=DELTA_PARAMETERS)


FAMILY = Family(name="wan", title="Wan2.1 / Wan2.2", classes=("WanTransformer3DModel",), shape=shape,
                lora_loader="WanLoraLoaderMixin",
                hand_built=True, text_split=False, pipeline_folders=PIPELINE_FOLDERS, video=True,
                standin_attention="cross",
                pipeline_parts=pipeline_parts, vae_stride_from=vae_stride, vae_class="AutoencoderKLWan",
                vae_parallel=True)
