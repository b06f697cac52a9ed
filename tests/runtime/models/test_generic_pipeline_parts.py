"""The text encoders' and VAEs' parameter counts each generic family declares (models/families/*.py
``PARTS``, the planner's generate memory estimate) equal transformers' / diffusers' classes built on the
meta device from the published config.json values the family module cites (no memory, a few seconds);
the largest layer (``text_encoder_layer``, what a sharded encoder gathers with the next one) is the
largest layer unit ``pipeline.text_encoder: sharded`` makes of them (runtime/pipelines/text.encoder_units)."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
diffusers = pytest.importorskip("diffusers")
transformers = pytest.importorskip("transformers")

from sporch.orchestrator.models.families import cogvideox, hunyuanvideo, ltx, pixart, qwenimage, sd3  # noqa: E402


def count(module) -> int:
    return sum(p.numel() for p in module.parameters())


def build(cls_name: str, lib, **config):
    with torch.device("meta"):
        cls = getattr(lib, cls_name)
        if lib is transformers:
            cfg_cls = {"T5EncoderModel": "T5Config", "CLIPTextModelWithProjection": "CLIPTextConfig",
                       "CLIPTextModel": "CLIPTextConfig", "LlamaModel": "LlamaConfig",
                       "Qwen2_5_VLForConditionalGeneration": "Qwen2_5_VLConfig"}[cls_name]
            return cls(getattr(transformers, cfg_cls)(**config))
        return cls(**config)


# the published text encoders' config.json values (the sources each family module names)
T5_XXL = dict(d_model=4096, d_ff=10240, num_layers=24, num_heads=64, d_kv=64, vocab_size=32128,
              feed_forward_proj="gated-gelu")
CLIP_L = dict(hidden_size=768, intermediate_size=3072, num_hidden_layers=12, num_attention_heads=12,
              projection_dim=768, vocab_size=49408, max_position_embeddings=77)
CLIP_G = dict(hidden_size=1280, intermediate_size=5120, num_hidden_layers=32, num_attention_heads=20,
              projection_dim=1280, vocab_size=49408, max_position_embeddings=77)
LLAVA_LLAMA3_8B = dict(hidden_size=4096, intermediate_size=14336, num_hidden_layers=32, num_attention_heads=32,
                       num_key_value_heads=8, vocab_size=128320)
QWEN25_VL_7B = dict(hidden_size=3584, intermediate_size=18944, num_hidden_layers=28, num_attention_heads=28,
                    num_key_value_heads=4, vocab_size=152064, tie_word_embeddings=False,
                    vision_config=dict(depth=32, hidden_size=1280, intermediate_size=3420, num_heads=16,
                                       out_hidden_size=3584, patch_size=14, spatial_merge_size=2,
                                       temporal_patch_size=2, in_chans=3, window_size=112,
                                       fullatt_block_indexes=[7, 15, 23, 31]))
SD3_VAE = dict(in_channels=3, out_channels=3, latent_channels=16, block_out_channels=[128, 256, 512, 512],
               down_block_types=["DownEncoderBlock2D"] * 4, up_block_types=["UpDecoderBlock2D"] * 4,
               layers_per_block=2, use_quant_conv=False, use_post_quant_conv=False, sample_size=1024)
#: huggingface.co/PixArt-alpha/PixArt-Sigma-XL-2-1024-MS vae/config.json (the SDXL VAE: 4 latent channels)
PIXART_SIGMA_VAE = dict(in_channels=3, out_channels=3, latent_channels=4, block_out_channels=[128, 256, 512, 512],
                        down_block_types=["DownEncoderBlock2D"] * 4, up_block_types=["UpDecoderBlock2D"] * 4,
                        layers_per_block=2, norm_num_groups=32, sample_size=512, scaling_factor=0.13025)
LTX_091_VAE = dict(timestep_conditioning=True, decoder_causal=False)
LTX_095_VAE = dict(block_out_channels=(128, 256, 512, 512), decoder_block_out_channels=(256, 512, 1024),
                   layers_per_block=(4, 6, 6, 2, 2), decoder_layers_per_block=(5, 5, 5, 5),
                   spatio_temporal_scaling=(True, True, True, True),
                   decoder_spatio_temporal_scaling=(True, True, True), decoder_inject_noise=(True, True, True, False),
                   downsample_type=("spatial", "temporal", "spatiotemporal", "spatiotemporal"),
                   upsample_residual=(True, True, True), upsample_factor=(2, 2, 2), timestep_conditioning=True,
                   encoder_causal=True, decoder_causal=False)

T5 = ("T5EncoderModel", transformers, T5_XXL)
#: family PARTS -> (its text encoders, its VAE) as (class, library, config)
CASES = {
    "qwen-image": (qwenimage.PARTS, [("Qwen2_5_VLForConditionalGeneration", transformers, QWEN25_VL_7B)],
                   ("AutoencoderKLQwenImage", diffusers, {})),
    "sd3.5": (sd3.PARTS, [("CLIPTextModelWithProjection", transformers, CLIP_L),
                          ("CLIPTextModelWithProjection", transformers, CLIP_G), T5],
              ("AutoencoderKL", diffusers, SD3_VAE)),
    "cogvideox-5b": (cogvideox.PARTS, [T5], ("AutoencoderKLCogVideoX", diffusers, {})),
    "ltx-video-2b": (ltx.PARTS_2B, [T5], ("AutoencoderKLLTXVideo", diffusers, LTX_091_VAE)),
    "ltx-video-13b": (ltx.PARTS_13B, [T5], ("AutoencoderKLLTXVideo", diffusers, LTX_095_VAE)),
    "hunyuanvideo": (hunyuanvideo.PARTS, [("LlamaModel", transformers, LLAVA_LLAMA3_8B),
                                          ("CLIPTextModel", transformers, CLIP_L)],
                     ("AutoencoderKLHunyuanVideo", diffusers, {})),
    "pixart-sigma": (pixart.PARTS, [T5], ("AutoencoderKL", diffusers, PIXART_SIGMA_VAE)),
}


@pytest.mark.parametrize("name", list(CASES))
def test_declared_encoder_and_vae_parameters_equal_the_classes_on_meta(name):
    parts, encoders, (vae_cls, vae_lib, vae_config) = CASES[name]
    built = [build(cls, lib, **cfg) for cls, lib, cfg in encoders]
    assert parts["text_encoder_parameters"] == sum(count(m) for m in built)
    assert parts["text_encoder_embedding"] == max(m.get_input_embeddings().weight.numel() for m in built)
    assert parts["vae_parameters"] == count(build(vae_cls, vae_lib, **vae_config))


@pytest.mark.parametrize("name", list(CASES))
def test_declared_largest_layer_is_the_largest_sharded_layer_unit(name):
    from sporch.runtime.pipelines.text import encoder_units

    parts, encoders, _ = CASES[name]
    layers = [count(layer) for cls, lib, cfg in encoders for group in encoder_units(build(cls, lib, **cfg))[0]
              for layer in group]
    assert parts["text_encoder_layer"] == max(layers), (name, max(layers))


@pytest.mark.parametrize("name", list(CASES))
def test_declared_tile_is_the_vae_class_default_tile(name):
    """``vae_tile_pixels`` (the planner's tiled decode estimate) is the tile ``enable_tiling()`` with no
    arguments sets on the published VAE (what ``pipeline.vae: tiled`` runs on the generic path)."""
    parts, _, (vae_cls, vae_lib, vae_config) = CASES[name]
    vae = build(vae_cls, vae_lib, **vae_config)
    vae.enable_tiling()
    if hasattr(vae, "tile_sample_min_height"):
        tile = vae.tile_sample_min_height * vae.tile_sample_min_width
    else:  # AutoencoderKL: square tiles of the config's sample_size
        tile = vae.tile_sample_min_size ** 2
    assert parts["vae_tile_pixels"] == tile, (name, tile)
