"""Tiny instances of diffusers 0.42.1 transformer classes the derivation was measured on apart from
the families' own specs (neither a ``_cp_plan`` nor a table when measured; SkyReels-V2 and Z-Image
have families since: ``skyreels-v2`` derives with its family's inputs, ``z-image`` ships a table), for
the split-plan derivation's tests (test_derived_plans.py) and table (bench/derived_plans.py); and the
inputs the comparisons with shipped tables and ``_cp_plan`` s use.

Each ``*_inputs`` builds the forward's keyword arguments for a token grid [f, h, w] and a text length,
as the class's pipeline calls it (hand-written: how to call a class is not derived). The classes of
sporch's families take theirs from the family's runtime module (``derive_check.family_spec``).
"""

from __future__ import annotations

import torch

from sporch.runtime.models.derive import IMAGE_GRIDS, VIDEO_GRIDS, DeriveSpec


def sana_inputs(config, *, batch, grid, text_len, generator, dtype=torch.float32):
    f, h, w = grid
    p = config["patch_size"]
    return dict(hidden_states=torch.randn(batch, config["in_channels"], h * p, w * p, generator=generator),
                encoder_hidden_states=torch.randn(batch, text_len, config["caption_channels"], generator=generator),
                timestep=torch.rand(batch, generator=generator) * 1000,
                encoder_attention_mask=torch.ones(batch, text_len), return_dict=False)


SANA = dict(in_channels=4, out_channels=4, num_attention_heads=4, attention_head_dim=8, num_layers=2,
            num_cross_attention_heads=4, cross_attention_head_dim=8, cross_attention_dim=32, caption_channels=16,
            sample_size=8, patch_size=1)


def mochi_inputs(config, *, batch, grid, text_len, generator, dtype=torch.float32):
    f, h, w = grid
    p = config["patch_size"]
    return dict(hidden_states=torch.randn(batch, config["in_channels"], f, h * p, w * p, generator=generator),
                encoder_hidden_states=torch.randn(batch, text_len, config["text_embed_dim"], generator=generator),
                timestep=torch.rand(batch, generator=generator) * 1000,
                encoder_attention_mask=torch.ones(batch, text_len, dtype=torch.bool), return_dict=False)


MOCHI = dict(patch_size=2, num_attention_heads=4, attention_head_dim=8, num_layers=2, pooled_projection_dim=16,
             in_channels=4, qk_norm="rms_norm", text_embed_dim=16, time_embed_dim=16, activation_fn="swiglu",
             max_sequence_length=16)


def hunyuan15_inputs(config, *, batch, grid, text_len, generator, dtype=torch.float32):
    f, h, w = grid
    return dict(hidden_states=torch.randn(batch, config["in_channels"], f, h, w, generator=generator),
                timestep=torch.rand(batch, generator=generator) * 1000,
                encoder_hidden_states=torch.randn(batch, text_len, config["text_embed_dim"], generator=generator),
                encoder_attention_mask=torch.ones(batch, text_len),
                encoder_hidden_states_2=torch.randn(batch, 3, config["text_embed_2_dim"], generator=generator),
                encoder_attention_mask_2=torch.ones(batch, 3),
                image_embeds=torch.zeros(batch, 2, config["image_embed_dim"]), return_dict=False)


HUNYUAN15 = dict(in_channels=9, out_channels=4, num_attention_heads=4, attention_head_dim=8, num_layers=2,
                 num_refiner_layers=1, patch_size=1, patch_size_t=1, text_embed_dim=16, text_embed_2_dim=8,
                 image_embed_dim=8, rope_axes_dim=(2, 2, 4), task_type="t2v")


def z_image_inputs(config, *, batch, grid, text_len, generator, dtype=torch.float32):
    f, h, w = grid
    c = config["in_channels"]
    return dict(x=[torch.randn(c, f, 2 * h, 2 * w, generator=generator) for _ in range(batch)],
                t=torch.rand(batch, generator=generator),
                cap_feats=[torch.randn(text_len, config["cap_feat_dim"], generator=generator) for _ in range(batch)],
                return_dict=False)


Z_IMAGE = dict(all_patch_size=(2,), all_f_patch_size=(1,), in_channels=4, dim=32, n_layers=2, n_refiner_layers=1,
               n_heads=4, n_kv_heads=4, norm_eps=1e-5, qk_norm=True, cap_feat_dim=16, rope_theta=256.0,
               t_scale=1000.0, axes_dims=[2, 2, 4], axes_lens=[64, 32, 32])


def skyreels_v2_inputs(config, *, batch, grid, text_len, generator, dtype=torch.float32):
    """SkyReels-V2's diffusion forcing (the DF checkpoints): one timestep per latent frame, so the
    modulation is per token."""
    f, h, w = grid
    pt, ph, pw = config["patch_size"]
    return dict(hidden_states=torch.randn(batch, config["in_channels"], f * pt, h * ph, w * pw, generator=generator),
                timestep=torch.rand(batch, f, generator=generator) * 1000,
                encoder_hidden_states=torch.randn(batch, text_len, config["text_dim"], generator=generator),
                enable_diffusion_forcing=True, return_dict=False)


SKYREELS_V2 = dict(patch_size=(1, 2, 2), num_attention_heads=4, attention_head_dim=8, in_channels=4, out_channels=4,
                   text_dim=16, freq_dim=16, ffn_dim=32, num_layers=2, cross_attn_norm=True,
                   qk_norm="rms_norm_across_heads", eps=1e-6, rope_max_seq_len=64)


def qwen_image_masked_inputs(config, **kw):
    """Qwen-Image's family inputs with the text mask its pipeline passes (all tokens kept; the
    derivation drops one), so the derived plan has the mask entry its ``_cp_plan`` has."""
    from sporch.runtime.models.families import qwenimage

    out = qwenimage.inputs(config, **kw)
    out["encoder_hidden_states_mask"] = torch.ones(kw["batch"], kw["text_len"])
    return out


#: name -> spec of the classes without a family
CANDIDATES = {
    "SkyReelsV2Transformer3DModel": DeriveSpec("SkyReelsV2Transformer3DModel", SKYREELS_V2, skyreels_v2_inputs,
                                               grids=VIDEO_GRIDS),
    "SanaTransformer2DModel": DeriveSpec("SanaTransformer2DModel", SANA, sana_inputs, grids=IMAGE_GRIDS),
    "MochiTransformer3DModel": DeriveSpec("MochiTransformer3DModel", MOCHI, mochi_inputs, grids=VIDEO_GRIDS),
    "HunyuanVideo15Transformer3DModel": DeriveSpec("HunyuanVideo15Transformer3DModel", HUNYUAN15, hunyuan15_inputs,
                                                   grids=VIDEO_GRIDS),
    "ZImageTransformer2DModel": DeriveSpec("ZImageTransformer2DModel", Z_IMAGE, z_image_inputs, grids=IMAGE_GRIDS),
}
