"""Presets that are shapes only: architecture stand-ins for planning, and the tiny test model.

A stand-in has the shapes of a published model that sporch does NOT compute (no published
weights load into it), so it carries no published name. ``joint_single_depth`` is the
single-stream depth used when a job switches the preset to ``attention: joint`` without giving
``single_depth``.
"""

from __future__ import annotations

from sporch.orchestrator.models.preset import ModelPreset

PRESETS = {
    # mmdit-video-12b: HunyuanVideo's shapes (20 dual-stream + 40 single-stream blocks, 3072);
    # HunyuanVideo's token refiner, guidance input, pooled text and RoPE split are not modelled.
    "mmdit-video-12b": ModelPreset(shape=dict(
        attention="joint", depth=20, single_depth=40, hidden=3072, num_heads=24, num_kv_heads=24,
        head_dim=128, ffn_dim=12288, patch=[1, 2, 2], in_channels=16, vae_stride=[4, 8, 8],
        text_len=256, text_dim=4096, qk_norm=True,
    )),
    # joint-video-42x3072: CogVideoX-5B's shapes (42 blocks, 48 x 64 heads, joint 3D attention
    # over text + video); sporch gives text and video separate weights (14.3e9 parameters).
    "joint-video-42x3072": ModelPreset(shape=dict(
        attention="joint", depth=42, single_depth=0, hidden=3072, num_heads=48, num_kv_heads=48,
        head_dim=64, ffn_dim=12288, patch=[1, 2, 2], in_channels=16, vae_stride=[4, 8, 8],
        text_len=226, text_dim=4096, qk_norm=True,
    )),
    # class-dit-xl: DiT-XL/2's shapes (class-conditional image DiT, no text); sporch uses 3D RoPE
    # and 16 output rows where DiT-XL/2 has fixed sin-cos positions and 32 (learned sigma).
    "class-dit-xl": ModelPreset(shape=dict(
        attention="self", depth=28, single_depth=0, hidden=1152, num_heads=16, num_kv_heads=16,
        head_dim=72, ffn_dim=4608, patch=[1, 2, 2], in_channels=4, vae_stride=[1, 8, 8],
        text_len=0, text_dim=0, qk_norm=False,
    )),
    # tiny: for tests (CPU, gloo, seconds).
    "tiny": ModelPreset(shape=dict(
        attention="cross", depth=2, single_depth=0, hidden=64, num_heads=4, num_kv_heads=4,
        head_dim=16, ffn_dim=128, patch=[1, 2, 2], in_channels=4, vae_stride=[4, 8, 8],
        text_len=8, text_dim=32, qk_norm=True, joint_single_depth=1,
    )),
}
