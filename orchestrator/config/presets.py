"""Model presets: published shapes of common DiTs, as plain data.

A preset with a published name (wan2.1-*, flux.1-*) computes that model exactly and loads its
published checkpoints (``model.weights``; docs/model.md); the others are architecture
stand-ins with the shapes of a published model, for planning and benchmarks.

Keys match ``plan.model`` (docs/contracts.md). ``ffn_dim`` is the FFN inner width;
``patch`` is [pt, ph, pw] and ``vae_stride`` [st, sh, sw] (image models: pt = st = 1).
``joint_single_depth`` is the single-stream depth used when a job switches the preset to
``attention: joint`` without giving ``single_depth``.

Guidance (``plan.model``): ``distilled`` marks a guidance-distilled model, which runs ONE
transformer pass per step and has no classifier-free-guidance branch (so ``parallel.cfg``
must be 1); ``guidance_embed`` says it takes ``workload.guidance_scale`` as an embedded input
(without it, a distilled model needs ``guidance_scale <= 1``). Both default to False.
"""

from __future__ import annotations

from typing import Any

from sporch.orchestrator.errors import SporchError

PRESETS: dict[str, dict[str, Any]] = {
    # Wan2.1 text-to-video (umT5 text encoder, 4096-d, 512 tokens).
    "wan2.1-t2v-1.3b": dict(
        attention="cross", depth=30, single_depth=0, hidden=1536, num_heads=12, num_kv_heads=12,
        head_dim=128, ffn_dim=8960, patch=[1, 2, 2], in_channels=16, vae_stride=[4, 8, 8],
        text_len=512, text_dim=4096, qk_norm=True,
    ),
    "wan2.1-t2v-14b": dict(
        attention="cross", depth=40, single_depth=0, hidden=5120, num_heads=40, num_kv_heads=40,
        head_dim=128, ffn_dim=13824, patch=[1, 2, 2], in_channels=16, vae_stride=[4, 8, 8],
        text_len=512, text_dim=4096, qk_norm=True,
    ),
    # Wan2.1 image-to-video 14B: 16 noise + 4 mask + 16 first-frame latent channels in,
    # CLIP image tokens through img_emb (runtime/model/config.py PUBLISHED holds those knobs).
    "wan2.1-i2v-14b": dict(
        attention="cross", depth=40, single_depth=0, hidden=5120, num_heads=40, num_kv_heads=40,
        head_dim=128, ffn_dim=13824, patch=[1, 2, 2], in_channels=36, vae_stride=[4, 8, 8],
        text_len=512, text_dim=4096, qk_norm=True,
    ),
    # FLUX.1 [dev]: MMDiT, 19 double-stream + 38 single-stream blocks, T5-XXL text, CLIP pooled
    # vector, guidance-distilled (workload.guidance_scale is its guidance input, no CFG).
    "flux.1-dev": dict(
        attention="joint", depth=19, single_depth=38, hidden=3072, num_heads=24, num_kv_heads=24,
        head_dim=128, ffn_dim=12288, patch=[1, 2, 2], in_channels=16, vae_stride=[1, 8, 8],
        text_len=512, text_dim=4096, qk_norm=True, distilled=True, guidance_embed=True,
    ),
    # FLUX.1 [schnell]: the same shapes without the guidance input (timestep-distilled).
    "flux.1-schnell": dict(
        attention="joint", depth=19, single_depth=38, hidden=3072, num_heads=24, num_kv_heads=24,
        head_dim=128, ffn_dim=12288, patch=[1, 2, 2], in_channels=16, vae_stride=[1, 8, 8],
        text_len=256, text_dim=4096, qk_norm=True, distilled=True, guidance_embed=False,
    ),
    # Architecture stand-ins for planning: the shapes of a published model that sporch does NOT
    # compute (no published weights load into them), so they carry no published name.
    # mmdit-video-12b: HunyuanVideo's shapes (20 dual-stream + 40 single-stream blocks, 3072);
    # HunyuanVideo's token refiner, guidance input, pooled text and RoPE split are not modelled.
    "mmdit-video-12b": dict(
        attention="joint", depth=20, single_depth=40, hidden=3072, num_heads=24, num_kv_heads=24,
        head_dim=128, ffn_dim=12288, patch=[1, 2, 2], in_channels=16, vae_stride=[4, 8, 8],
        text_len=256, text_dim=4096, qk_norm=True,
    ),
    # joint-video-42x3072: CogVideoX-5B's shapes (42 blocks, 48 x 64 heads, joint 3D attention
    # over text + video); sporch gives text and video separate weights (14.3e9 parameters).
    "joint-video-42x3072": dict(
        attention="joint", depth=42, single_depth=0, hidden=3072, num_heads=48, num_kv_heads=48,
        head_dim=64, ffn_dim=12288, patch=[1, 2, 2], in_channels=16, vae_stride=[4, 8, 8],
        text_len=226, text_dim=4096, qk_norm=True,
    ),
    # class-dit-xl: DiT-XL/2's shapes (class-conditional image DiT, no text); sporch uses 3D RoPE
    # and 16 output rows where DiT-XL/2 has fixed sin-cos positions and 32 (learned sigma).
    "class-dit-xl": dict(
        attention="self", depth=28, single_depth=0, hidden=1152, num_heads=16, num_kv_heads=16,
        head_dim=72, ffn_dim=4608, patch=[1, 2, 2], in_channels=4, vae_stride=[1, 8, 8],
        text_len=0, text_dim=0, qk_norm=False,
    ),
    # tiny: for tests (CPU, gloo, seconds).
    "tiny": dict(
        attention="cross", depth=2, single_depth=0, hidden=64, num_heads=4, num_kv_heads=4,
        head_dim=16, ffn_dim=128, patch=[1, 2, 2], in_channels=4, vae_stride=[4, 8, 8],
        text_len=8, text_dim=32, qk_norm=True, joint_single_depth=1,
    ),
}


def preset_names() -> list[str]:
    return list(PRESETS)


def get_preset(name: str) -> dict[str, Any]:
    key = name.strip().lower()
    if key not in PRESETS:
        raise SporchError(f"unknown model preset {name!r}; presets: {', '.join(PRESETS)}")
    return dict(PRESETS[key])
