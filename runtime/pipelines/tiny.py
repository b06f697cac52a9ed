"""Tiny random Wan2.1 / Wan2.2 A14B / TI2V-5B / Flux.1 pipelines in the publishers' diffusers layout, built with
diffusers and transformers from tiny configs (no hub access), for tests and smoke runs.

    save_tiny_pipeline("wan", "runs/tiny-wan", plan.model)   # the plan's model section (shapes)

The transformer's shapes are taken from the sporch model dict, so a job with that model and
``model.weights`` pointing at the folder loads it. A model dict with ``boundary_ratio`` gets
Wan2.2 A14B's second expert (``transformer_2``, other random weights) and that boundary in
``model_index.json``; one with more input than output channels is an image-to-video pipeline
without a CLIP image encoder (``WanImageToVideoPipeline``, as Wan2.2 I2V A14B), or with one when
the model has ``image_dim`` (Wan2.1 I2V: a tiny ``CLIPVisionModel`` and its ``CLIPImageProcessor``); one with
``expand_timesteps`` is Wan2.2 TI2V-5B's (the Wan2.2 VAE: 2 x 2 pixels folded into channels, residual
blocks; ``expand_timesteps`` in model_index.json). The tokenizer is a word-level vocabulary
built with the ``tokenizers`` library (unknown words map to ``<unk>``, ``</s>`` is appended),
wrapped in ``PreTrainedTokenizerFast`` and saved with ``save_pretrained``. Every weight is
drawn from generators seeded by ``seed`` (the global RNG is left alone).
"""

from __future__ import annotations

import math
import shutil
import tempfile
from pathlib import Path
from typing import Any, Mapping

import torch

from sporch.runtime.model import ModelConfig
from sporch.runtime.model.tiny_parts import WORDS, randomize, t5_config, tiny_tokenizer

def tiny_wan_pipeline(model: Mapping[str, Any], seed: int = 0):
    """A WanPipeline whose transformer has the shapes of ``model`` (attention cross); two
    experts when ``model`` has a ``boundary_ratio``."""
    from diffusers import AutoencoderKLWan, UniPCMultistepScheduler, WanPipeline, WanTransformer3DModel
    from transformers import UMT5Config, UMT5EncoderModel

    cfg = ModelConfig.from_dict(model)
    heads, hd = int(model["num_heads"]), int(model["head_dim"])
    channels = int(model.get("out_channels") or model["in_channels"])

    clip = {"image_dim": cfg.image_dim, "added_kv_proj_dim": heads * hd} if cfg.image_dim else {}

    def expert(s: int):
        return randomize(WanTransformer3DModel(
            patch_size=tuple(model["patch"]), num_attention_heads=heads, attention_head_dim=hd,
            in_channels=int(model["in_channels"]), out_channels=channels, text_dim=int(model["text_dim"]),
            freq_dim=cfg.freq_dim, ffn_dim=int(model["ffn_dim"]), num_layers=int(model["depth"]),
            cross_attn_norm=True, qk_norm="rms_norm_across_heads", eps=cfg.eps, **clip), s)

    transformer = expert(seed)
    boundary = model.get("boundary_ratio")
    two = {} if boundary is None else {"transformer_2": expert(seed + 7), "boundary_ratio": float(boundary)}
    text_encoder = UMT5EncoderModel(t5_config(UMT5Config, len(WORDS) + 3, int(model["text_dim"]))).eval()
    st, sh, _ = (int(s) for s in model["vae_stride"])
    # the Wan2.2 VAE (TI2V-5B) folds 2 x 2 pixels into channels first, then downsamples
    wan22 = {"is_residual": True, "patch_size": 2, "in_channels": 12, "out_channels": 12} if cfg.expand_timesteps else {}
    downs = int(math.log2(sh)) - (1 if wan22 else 0)
    temporal = [False] * (downs - int(math.log2(st))) + [True] * int(math.log2(st))
    g = torch.Generator().manual_seed(seed + 1)
    vae = AutoencoderKLWan(base_dim=8, z_dim=channels, dim_mult=[1] * (downs + 1), num_res_blocks=1,
                           temperal_downsample=temporal, scale_factor_temporal=st, scale_factor_spatial=sh,
                           latents_mean=(0.2 * torch.randn(channels, generator=g)).tolist(),
                           latents_std=(1.0 + 0.5 * torch.rand(channels, generator=g)).tolist(), **wan22).eval()
    scheduler = UniPCMultistepScheduler(prediction_type="flow_prediction", use_flow_sigmas=True,
                                        num_train_timesteps=1000, flow_shift=3.0)
    parts = dict(tokenizer=tiny_tokenizer(int(model["text_len"])), text_encoder=text_encoder, vae=vae,
                 scheduler=scheduler, transformer=transformer, **two)
    if channels < int(model["in_channels"]):  # image-to-video: the first frame as latent condition
        from diffusers import WanImageToVideoPipeline

        encoder, processor = tiny_image_encoder(cfg.image_dim, seed + 2) if cfg.image_dim else (None, None)
        return WanImageToVideoPipeline(image_encoder=encoder, image_processor=processor, **parts)
    return WanPipeline(**parts, **({"expand_timesteps": True} if cfg.expand_timesteps else {}))


#: The tiny CLIP image encoder's input: 32 x 32 pixels in 8 x 8 patches, so 16 + 1 image tokens.
CLIP_IMAGE_SIZE, CLIP_PATCH = 32, 8


def tiny_image_encoder(width: int, seed: int):
    """Wan2.1 I2V's image encoder parts, tiny: a CLIPVisionModel whose hidden states are ``width``
    wide (the transformer's ``image_dim``; two layers, as the pipeline reads the penultimate
    hidden states) and the CLIPImageProcessor that resizes, centre-crops and normalises for it."""
    from transformers import CLIPImageProcessor, CLIPVisionConfig, CLIPVisionModel

    encoder = randomize(CLIPVisionModel(CLIPVisionConfig(
        hidden_size=width, intermediate_size=2 * width, num_hidden_layers=2, num_attention_heads=4,
        image_size=CLIP_IMAGE_SIZE, patch_size=CLIP_PATCH, projection_dim=width)), seed)
    processor = CLIPImageProcessor(size={"shortest_edge": CLIP_IMAGE_SIZE},
                                   crop_size={"height": CLIP_IMAGE_SIZE, "width": CLIP_IMAGE_SIZE})
    return encoder, processor


def tiny_flux_pipeline(model: Mapping[str, Any], seed: int = 0):
    """A FluxPipeline whose transformer has the shapes of ``model`` (attention joint, a
    flux.1-* preset: pooled CLIP vector 768 wide, guidance input for flux.1-dev)."""
    from diffusers import AutoencoderKL, FlowMatchEulerDiscreteScheduler, FluxPipeline, FluxTransformer2DModel
    from transformers import CLIPTextConfig, CLIPTextModel, T5Config, T5EncoderModel

    cfg = ModelConfig.from_dict(model)
    rope = cfg.rope_axes or (cfg.head_dim - 4 * (cfg.head_dim // 6), 2 * (cfg.head_dim // 6), 2 * (cfg.head_dim // 6))
    transformer = randomize(FluxTransformer2DModel(
        patch_size=1, in_channels=4 * cfg.in_channels, num_layers=cfg.depth, num_single_layers=cfg.single_depth,
        attention_head_dim=cfg.head_dim, num_attention_heads=cfg.num_heads, joint_attention_dim=cfg.text_dim,
        pooled_projection_dim=cfg.pooled_dim, guidance_embeds=cfg.guidance_embed, axes_dims_rope=tuple(rope)), seed)
    vocab = len(WORDS) + 3
    clip = CLIPTextModel(CLIPTextConfig(vocab_size=vocab, hidden_size=cfg.pooled_dim, intermediate_size=64,
                                        num_hidden_layers=1, num_attention_heads=4, max_position_embeddings=77,
                                        pad_token_id=0, bos_token_id=1, eos_token_id=1)).eval()
    t5 = T5EncoderModel(t5_config(T5Config, vocab, cfg.text_dim)).eval()
    sh = int(model["vae_stride"][1])
    blocks = [8 * 2 ** i for i in range(int(math.log2(sh)) + 1)]
    vae = AutoencoderKL(in_channels=3, out_channels=3, down_block_types=["DownEncoderBlock2D"] * len(blocks),
                        up_block_types=["UpDecoderBlock2D"] * len(blocks), block_out_channels=blocks,
                        layers_per_block=1, latent_channels=cfg.in_channels, norm_num_groups=4, sample_size=32,
                        use_quant_conv=False, use_post_quant_conv=False, scaling_factor=0.3611,
                        shift_factor=0.1159).eval()
    scheduler = FlowMatchEulerDiscreteScheduler(shift=3.0, use_dynamic_shifting=True, base_shift=0.5, max_shift=1.15,
                                                base_image_seq_len=256, max_image_seq_len=4096)
    return FluxPipeline(scheduler=scheduler, vae=vae, text_encoder=clip, tokenizer=tiny_tokenizer(77),
                        text_encoder_2=t5, tokenizer_2=tiny_tokenizer(int(model["text_len"])), transformer=transformer)


#: The tiny pipeline of each family with a generate pipeline (plan.model.family -> builder).
TINY_PIPELINES = {"wan": tiny_wan_pipeline, "flux": tiny_flux_pipeline}


def save_tiny_pipeline(family: str, root: str | Path, model: Any, seed: int = 0) -> Path:
    """Build the tiny ``family`` ("wan" | "flux") pipeline and save it at ``root`` (atomically:
    a temporary folder next to it, then a rename). ``model``: the plan's model section, or its dict."""
    if not isinstance(model, Mapping):
        model = model.to_dict()
    with torch.random.fork_rng(devices=[]):  # constructors draw initial weights from the global RNG
        torch.manual_seed(seed)
        pipe = TINY_PIPELINES[family](model, seed)
    return save_atomically(pipe, root)


def save_atomically(pipe: Any, root: str | Path) -> Path:
    """``pipe.save_pretrained`` into a temporary folder beside ``root``, then a rename: ``root``
    holds a whole pipeline or nothing."""
    root = Path(root)
    root.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{root.name}-", dir=root.parent))
    try:
        pipe.save_pretrained(tmp)
        tmp.rename(root)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return root
