"""Tiny random pipelines of the generic-path families (Qwen-Image, SD3.5, CogVideoX, LTX-Video,
HunyuanVideo), in the
publishers' diffusers layout, built offline from tiny configs: the family's real component classes
(its diffusers transformer, VAE, scheduler and pipeline; transformers' text encoders), every weight
seeded, the word-level tokenizer of :mod:`.tiny`.

    save_tiny_generic("sd3", "runs/tiny-sd3")

Each transformer is the generic path's tiny config of the family (``runtime/model/generic/families``:
``TINY``) with the text widths matched to the tiny encoders; each VAE downsamples 8 x 8 pixels per
latent (and 4 frames per latent frame for CogVideoX and HunyuanVideo; LTX-Video's 32 x 32 pixels and 8 frames), as the
published ones do, so the planner's
token grid (``contract/families``: ``vae_stride``) is the pipeline's.
"""

from __future__ import annotations

from pathlib import Path
from typing import Callable

import torch

from sporch.runtime.model.generic.build import random_diffusers
from sporch.runtime.model.generic.families import family_module

from .tiny import WORDS, _t5_config, randomize, save_atomically, tiny_tokenizer

__all__ = ["TINY_GENERIC", "save_tiny_generic", "tiny_qwenimage_pipeline", "tiny_sd3_pipeline",
           "tiny_cogvideox_pipeline", "tiny_ltx_pipeline", "tiny_hunyuanvideo_pipeline"]

VOCAB = len(WORDS) + 3


def tiny_qwenimage_pipeline(seed: int = 0):
    """QwenImagePipeline: a tiny Qwen2.5-VL (one text layer, 24 wide; a one-block vision tower the
    pipeline never calls), AutoencoderKLQwenImage (z 4, 8 x 8 pixels per latent), the flow-matching
    Euler scheduler with Qwen-Image's dynamic shift."""
    from diffusers import AutoencoderKLQwenImage, FlowMatchEulerDiscreteScheduler, QwenImagePipeline
    from transformers import Qwen2_5_VLConfig, Qwen2_5_VLForConditionalGeneration

    config = {**family_module("qwen-image").TINY, "joint_attention_dim": 24}
    transformer = random_diffusers("QwenImageTransformer2DModel", config, seed=seed)
    z = int(config["out_channels"])
    text = Qwen2_5_VLConfig(
        text_config=dict(vocab_size=VOCAB, hidden_size=24, intermediate_size=48, num_hidden_layers=1,
                         num_attention_heads=2, num_key_value_heads=1, max_position_embeddings=2048,
                         rope_scaling={"type": "mrope", "mrope_section": [2, 2, 2]}, pad_token_id=0),
        vision_config=dict(depth=1, hidden_size=16, intermediate_size=32, num_heads=2, out_hidden_size=24,
                           patch_size=2, spatial_merge_size=1, temporal_patch_size=1, fullatt_block_indexes=[0]),
        vocab_size=VOCAB, pad_token_id=0)
    encoder = randomize(Qwen2_5_VLForConditionalGeneration(text), seed + 1)
    g = torch.Generator().manual_seed(seed + 2)
    vae = AutoencoderKLQwenImage(base_dim=8, z_dim=z, dim_mult=[1, 1, 1, 1], num_res_blocks=1,
                                 temperal_downsample=[False, False, False],
                                 latents_mean=(0.2 * torch.randn(z, generator=g)).tolist(),
                                 latents_std=(1.0 + 0.5 * torch.rand(z, generator=g)).tolist()).eval()
    scheduler = FlowMatchEulerDiscreteScheduler(shift=1.0, use_dynamic_shifting=True, base_shift=0.5, max_shift=0.9,
                                                base_image_seq_len=256, max_image_seq_len=8192,
                                                time_shift_type="exponential")
    return QwenImagePipeline(scheduler=scheduler, vae=vae, text_encoder=encoder, tokenizer=tiny_tokenizer(1024),
                             transformer=transformer)


def _autoencoder_kl(latent_channels: int, seed: int):
    from diffusers import AutoencoderKL

    blocks = [8, 8, 8, 8]  # three downsamples: 8 x 8 pixels per latent
    # sample_size 32: enable_tiling's default tiles, 32 pixels (4 x 4 latents, stride 3), split a 64 x 48 image
    vae = AutoencoderKL(in_channels=3, out_channels=3, down_block_types=["DownEncoderBlock2D"] * 4,
                        up_block_types=["UpDecoderBlock2D"] * 4, block_out_channels=blocks, layers_per_block=1,
                        latent_channels=latent_channels, norm_num_groups=4, sample_size=32, scaling_factor=1.5305,
                        shift_factor=0.0609)
    return randomize(vae, seed)


def tiny_sd3_pipeline(seed: int = 0):
    """StableDiffusion3Pipeline: two CLIP text encoders with projection (8 wide each, 4-wide pooled
    projections: 8 pooled together), a T5 encoder 16 wide (the transformer's joint_attention_dim),
    AutoencoderKL (4 latent channels, 8 x 8 pixels per latent), SD3's flow-matching Euler scheduler
    (shift 3)."""
    from diffusers import FlowMatchEulerDiscreteScheduler, StableDiffusion3Pipeline
    from transformers import CLIPTextConfig, CLIPTextModelWithProjection, T5Config, T5EncoderModel

    config = family_module("sd3").TINY
    transformer = random_diffusers("SD3Transformer2DModel", dict(config), seed=seed)

    def clip(s: int):
        return randomize(CLIPTextModelWithProjection(CLIPTextConfig(
            vocab_size=VOCAB, hidden_size=8, intermediate_size=16, num_hidden_layers=2, num_attention_heads=2,
            max_position_embeddings=77, projection_dim=config["pooled_projection_dim"] // 2, pad_token_id=0,
            bos_token_id=1, eos_token_id=1)), s)

    t5 = randomize(T5EncoderModel(_t5_config(T5Config, VOCAB, config["joint_attention_dim"])), seed + 3)
    scheduler = FlowMatchEulerDiscreteScheduler(shift=3.0)
    return StableDiffusion3Pipeline(transformer=transformer, scheduler=scheduler,
                                    vae=_autoencoder_kl(config["in_channels"], seed + 4),
                                    text_encoder=clip(seed + 1), tokenizer=tiny_tokenizer(77),
                                    text_encoder_2=clip(seed + 2), tokenizer_2=tiny_tokenizer(77),
                                    text_encoder_3=t5, tokenizer_3=tiny_tokenizer(256))


def tiny_cogvideox_pipeline(seed: int = 0):
    """CogVideoXPipeline: a T5 encoder 16 wide (the transformer's text_embed_dim), AutoencoderKLCogVideoX
    (4 latent channels, 8 x 8 pixels and 4 frames per latent), the CogVideoX DDIM scheduler
    (v-prediction, zero terminal SNR, as CogVideoX-5b's). Its sample size 96 x 80 sets ``enable_tiling``'s
    default tiles to half of it, 48 x 40 pixels (6 x 5 latents: strides 5 x 4 latents, 40 x 32 pixels, as
    the blend keeps; CogVideoX-5b's 240 x 360 keep them too), so a 64 x 48 image is decoded in 2 x 2 tiles."""
    from diffusers import AutoencoderKLCogVideoX, CogVideoXDDIMScheduler, CogVideoXPipeline
    from transformers import T5Config, T5EncoderModel

    config = family_module("cogvideox").TINY
    transformer = random_diffusers("CogVideoXTransformer3DModel", dict(config), seed=seed)
    t5 = randomize(T5EncoderModel(_t5_config(T5Config, VOCAB, config["text_embed_dim"])), seed + 1)
    vae = randomize(AutoencoderKLCogVideoX(
        block_out_channels=(8, 8, 8, 8), latent_channels=config["in_channels"], layers_per_block=1, norm_num_groups=4,
        temporal_compression_ratio=config["temporal_compression_ratio"], sample_height=96, sample_width=80,
        scaling_factor=0.7), seed + 2)
    scheduler = CogVideoXDDIMScheduler(beta_schedule="scaled_linear", beta_start=0.00085, beta_end=0.012,
                                       prediction_type="v_prediction", rescale_betas_zero_snr=True,
                                       timestep_spacing="trailing", set_alpha_to_one=True, snr_shift_scale=1.0,
                                       clip_sample=False)
    return CogVideoXPipeline(tokenizer=tiny_tokenizer(int(config["max_text_seq_length"])), text_encoder=t5, vae=vae,
                             transformer=transformer, scheduler=scheduler)


def tiny_ltx_pipeline(seed: int = 0):
    """LTXPipeline: a T5 encoder 16 wide (the transformer's caption_channels), AutoencoderKLLTXVideo
    (8 latent channels, 8 wide; patch 4 then three 2 x 2 x 2 scalings: 32 x 32 pixels and 8 frames
    per latent, as LTX-Video's; random latent statistics), the flow-matching Euler scheduler with
    LTX-Video's dynamic shift. The tokenizer pads every prompt to the pipeline's 128 tokens and its
    mask drops the padding's keys."""
    from diffusers import AutoencoderKLLTXVideo, FlowMatchEulerDiscreteScheduler, LTXPipeline
    from transformers import T5Config, T5EncoderModel

    config = family_module("ltx-video").TINY
    transformer = random_diffusers("LTXVideoTransformer3DModel", dict(config), seed=seed)
    t5 = randomize(T5EncoderModel(_t5_config(T5Config, VOCAB, config["caption_channels"])), seed + 1)
    z = int(config["in_channels"])
    vae = randomize(AutoencoderKLLTXVideo(latent_channels=z, block_out_channels=(8, 8, 8, 8),
                                          decoder_block_out_channels=(8, 8, 8, 8), layers_per_block=(1, 1, 1, 1, 1),
                                          decoder_layers_per_block=(1, 1, 1, 1, 1)), seed + 2)
    g = torch.Generator().manual_seed(seed + 3)
    vae.latents_mean.copy_(0.2 * torch.randn(z, generator=g))
    vae.latents_std.copy_(1.0 + 0.5 * torch.rand(z, generator=g))
    scheduler = FlowMatchEulerDiscreteScheduler(use_dynamic_shifting=True, base_shift=0.95, max_shift=2.05,
                                                base_image_seq_len=1024, max_image_seq_len=4096, shift_terminal=0.1)
    return LTXPipeline(scheduler=scheduler, vae=vae, text_encoder=t5, tokenizer=tiny_tokenizer(128),
                       transformer=transformer)


def tiny_hunyuanvideo_pipeline(seed: int = 0):
    """HunyuanVideoPipeline: a tiny Llama (two layers, 16 wide: the transformer's text_embed_dim; the
    pipeline takes its third-last hidden states), a CLIP text encoder whose pooled output is 8 wide
    (pooled_projection_dim), AutoencoderKLHunyuanVideo (4 latent channels, 8 x 8 pixels and 4
    frames per latent), the flow-matching Euler scheduler with HunyuanVideo's shift 7. The Llama
    tokenizer pads every prompt (after the pipeline's template) to 256 tokens and its mask drops the
    padding's keys."""
    from diffusers import AutoencoderKLHunyuanVideo, FlowMatchEulerDiscreteScheduler, HunyuanVideoPipeline
    from transformers import CLIPTextConfig, CLIPTextModel, LlamaConfig, LlamaModel

    config = family_module("hunyuanvideo").TINY
    transformer = random_diffusers("HunyuanVideoTransformer3DModel", dict(config), seed=seed)
    llama = randomize(LlamaModel(LlamaConfig(
        vocab_size=VOCAB, hidden_size=config["text_embed_dim"], intermediate_size=32, num_hidden_layers=2,
        num_attention_heads=2, num_key_value_heads=1, max_position_embeddings=512, pad_token_id=0)), seed + 1)
    clip = randomize(CLIPTextModel(CLIPTextConfig(
        vocab_size=VOCAB, hidden_size=config["pooled_projection_dim"], intermediate_size=16, num_hidden_layers=1,
        num_attention_heads=2, max_position_embeddings=77, pad_token_id=0, bos_token_id=1, eos_token_id=1)), seed + 2)
    vae = randomize(AutoencoderKLHunyuanVideo(latent_channels=config["in_channels"], block_out_channels=(8, 8, 8, 8),
                                              layers_per_block=1, norm_num_groups=4), seed + 3)
    return HunyuanVideoPipeline(text_encoder=llama, tokenizer=tiny_tokenizer(512), transformer=transformer, vae=vae,
                                scheduler=FlowMatchEulerDiscreteScheduler(shift=7.0), text_encoder_2=clip,
                                tokenizer_2=tiny_tokenizer(77))


#: family name (plan.model.family) -> its tiny pipeline's builder
TINY_GENERIC: dict[str, Callable] = {"qwen-image": tiny_qwenimage_pipeline, "sd3": tiny_sd3_pipeline,
                                     "cogvideox": tiny_cogvideox_pipeline, "ltx-video": tiny_ltx_pipeline,
                                     "hunyuanvideo": tiny_hunyuanvideo_pipeline}


def save_tiny_generic(family: str, root: str | Path, seed: int = 0) -> Path:
    """Build the tiny ``family`` pipeline and save it at ``root`` (atomically: a temporary folder
    beside it, then a rename); the global RNG is left as it was."""
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        pipe = TINY_GENERIC[family](seed)
    return save_atomically(pipe, root)
