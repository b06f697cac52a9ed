"""Wan2.1 (T2V 1.3B / 14B, I2V 14B at 480p and 720p), Wan2.2 A14B (T2V, I2V) and Wan2.2 TI2V-5B: the published
models' facts.

* ``PRESETS``: each model's shape (umT5 text encoder, 4096 wide, 512 tokens; VAE strides
  4 x 8 x 8) and knobs. With these a sporch model computes Wan2.1 exactly and loads its
  published checkpoints (docs/model.md).
* Wan2.2 A14B: two experts of the Wan2.1-14B shape (``transformer``: high noise,
  ``transformer_2``: low noise), switched at ``boundary_ratio`` x 1000 (a knob here; diffusers'
  model_index.json holds it as the pipeline's ``boundary_ratio``). The I2V A14B takes the image as
  latent condition only (36 channels in, no CLIP image encoder).
* ``TABLE``: sporch's parameter names <- the original release (Wan-Video/Wan2.1,
  ``WanModel``) and diffusers (``WanTransformer3DModel``), one row per module (keymap.py).
"""

from __future__ import annotations

from sporch.orchestrator.models.keymap import Table, rule
from sporch.orchestrator.models.preset import ModelPreset

#: What every Wan2.1 transformer has: sinusoidal timestep embedding 256 wide, norms' eps 1e-6.
KNOBS = {"freq_dim": 256, "eps": 1e-6}

PRESETS = {
    "wan2.1-t2v-1.3b": ModelPreset(
        shape=dict(attention="cross", depth=30, single_depth=0, hidden=1536, num_heads=12, num_kv_heads=12,
                   head_dim=128, ffn_dim=8960, patch=[1, 2, 2], in_channels=16, vae_stride=[4, 8, 8],
                   text_len=512, text_dim=4096, qk_norm=True),
        knobs=KNOBS,
    ),
    "wan2.1-t2v-14b": ModelPreset(
        shape=dict(attention="cross", depth=40, single_depth=0, hidden=5120, num_heads=40, num_kv_heads=40,
                   head_dim=128, ffn_dim=13824, patch=[1, 2, 2], in_channels=16, vae_stride=[4, 8, 8],
                   text_len=512, text_dim=4096, qk_norm=True),
        knobs=KNOBS,
    ),
    # Wan2.1 image-to-video 14B, two releases of one architecture (Wan-AI/Wan2.1-I2V-14B-480P and
    # -720P; the diffusers folders Wan-AI/Wan2.1-I2V-14B-480P-Diffusers and -720P-Diffusers ship the
    # same transformer/config.json: WanTransformer3DModel, in_channels 36, out_channels 16,
    # image_dim 1280, added_kv_proj_dim 5120, 40 layers of 40 x 128 heads, ffn 13824). Input: 16 noise
    # + 4 mask + 16 first-frame latent channels; 257 CLIP image tokens 1280 wide (the folder's
    # image_encoder: CLIPVisionModel, ViT-H/14 at 224 px, its penultimate hidden states) through
    # img_emb, their own keys and values in every cross-attention. The releases differ in the videos
    # they were trained on (480 x 832 and 720 x 1280) and the flow_shift recommended with them (3 and
    # 5; a generate job takes its folder's scheduler, or workload.shift).
    **{f"wan2.1-i2v-14b-{res}p": ModelPreset(
        shape=dict(attention="cross", depth=40, single_depth=0, hidden=5120, num_heads=40, num_kv_heads=40,
                   head_dim=128, ffn_dim=13824, patch=[1, 2, 2], in_channels=36, vae_stride=[4, 8, 8],
                   text_len=512, text_dim=4096, qk_norm=True),
        knobs={**KNOBS, "out_channels": 16, "image_dim": 1280, "image_len": 257},
    ) for res in (480, 720)},
    # Wan2.2 A14B (Wan-AI/Wan2.2-T2V-A14B-Diffusers, -I2V-A14B-Diffusers): both experts have the
    # Wan2.1-14B transformer config; the boundaries are their model_index.json's boundary_ratio.
    "wan2.2-t2v-a14b": ModelPreset(
        shape=dict(attention="cross", depth=40, single_depth=0, hidden=5120, num_heads=40, num_kv_heads=40,
                   head_dim=128, ffn_dim=13824, patch=[1, 2, 2], in_channels=16, vae_stride=[4, 8, 8],
                   text_len=512, text_dim=4096, qk_norm=True),
        knobs={**KNOBS, "boundary_ratio": 0.875},
    ),
    "wan2.2-i2v-a14b": ModelPreset(
        shape=dict(attention="cross", depth=40, single_depth=0, hidden=5120, num_heads=40, num_kv_heads=40,
                   head_dim=128, ffn_dim=13824, patch=[1, 2, 2], in_channels=36, vae_stride=[4, 8, 8],
                   text_len=512, text_dim=4096, qk_norm=True),
        knobs={**KNOBS, "out_channels": 16, "boundary_ratio": 0.9},
    ),
    # Wan2.2 TI2V-5B (Wan-AI/Wan2.2-TI2V-5B-Diffusers): 48 latent channels from the Wan2.2 VAE
    # (strides 4 x 16 x 16); one timestep per token (model_index.json's expand_timesteps), text- or
    # image-to-video with one transformer (the image replaces the first latent frame).
    "wan2.2-ti2v-5b": ModelPreset(
        shape=dict(attention="cross", depth=30, single_depth=0, hidden=3072, num_heads=24, num_kv_heads=24,
                   head_dim=128, ffn_dim=14336, patch=[1, 2, 2], in_channels=48, vae_stride=[4, 16, 16],
                   text_len=512, text_dim=4096, qk_norm=True),
        knobs={**KNOBS, "expand_timesteps": True},
    ),
}

B = "blocks.{i}."

TABLE = Table(
    model="Wan2.1",
    rules=[
        rule("patch_embedding", "conv_as_linear", original="patch_embedding", diffusers="patch_embedding"),
        rule("text_embedding.fc1", original="text_embedding.0",
             diffusers="condition_embedder.text_embedder.linear_1"),
        rule("text_embedding.fc2", original="text_embedding.2",
             diffusers="condition_embedder.text_embedder.linear_2"),
        rule("time_embedding.fc1", original="time_embedding.0",
             diffusers="condition_embedder.time_embedder.linear_1"),
        rule("time_embedding.fc2", original="time_embedding.2",
             diffusers="condition_embedder.time_embedder.linear_2"),
        rule("time_projection", original="time_projection.1", diffusers="condition_embedder.time_proj"),
        # image-to-video: CLIP image tokens -> model width
        rule("img_emb.norm1", original="img_emb.proj.0", diffusers="condition_embedder.image_embedder.norm1"),
        rule("img_emb.fc1", original="img_emb.proj.1", diffusers="condition_embedder.image_embedder.ff.net.0.proj"),
        rule("img_emb.fc2", original="img_emb.proj.3", diffusers="condition_embedder.image_embedder.ff.net.2"),
        rule("img_emb.norm2", original="img_emb.proj.4", diffusers="condition_embedder.image_embedder.norm2"),
        # blocks
        *(rule(B + f"{ours}.{o}", original=B + f"{ours}.{o}", diffusers=B + f"{theirs}.{d}")
          for ours, theirs in (("self_attn", "attn1"), ("cross_attn", "attn2"))
          for o, d in (("q", "to_q"), ("k", "to_k"), ("v", "to_v"), ("o", "to_out.0"), ("norm_q", "norm_q"),
                       ("norm_k", "norm_k"))),
        rule(B + "norm3", original=B + "norm3", diffusers=B + "norm2"),  # the cross-attention norm
        rule(B + "cross_attn.k_img", original=B + "cross_attn.k_img", diffusers=B + "attn2.add_k_proj"),
        rule(B + "cross_attn.v_img", original=B + "cross_attn.v_img", diffusers=B + "attn2.add_v_proj"),
        rule(B + "cross_attn.norm_k_img", original=B + "cross_attn.norm_k_img", diffusers=B + "attn2.norm_added_k"),
        rule(B + "ffn.fc1", original=B + "ffn.0", diffusers=B + "ffn.net.0.proj"),
        rule(B + "ffn.fc2", original=B + "ffn.2", diffusers=B + "ffn.net.2"),
        rule(B + "modulation", original=B + "modulation", diffusers=B + "scale_shift_table"),
        # head: rows are (pt, ph, pw, C) in both formats
        rule("head.head", "rows_channel_last_to_first", original="head.head", diffusers="proj_out"),
        rule("head.modulation", original="head.modulation", diffusers="scale_shift_table"),
    ],
    config_keys={
        "original": {"dim": "hidden", "num_heads": "num_heads", "num_layers": "depth", "ffn_dim": "ffn_dim",
                     "in_dim": "in_channels", "out_dim": "out_dim", "freq_dim": "freq_dim", "text_dim": "text_dim",
                     "patch_size": "patch", "eps": "eps"},
        "diffusers": {"num_attention_heads": "num_heads", "attention_head_dim": "head_dim", "num_layers": "depth",
                      "ffn_dim": "ffn_dim", "in_channels": "in_channels", "out_channels": "out_dim",
                      "freq_dim": "freq_dim", "text_dim": "text_dim", "patch_size": "patch", "image_dim": "image_dim",
                      "eps": "eps"},
    },
)
