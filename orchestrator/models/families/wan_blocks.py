"""The parameters of diffusers' Wan-style transformer layers, shared by the families built on Wan2.1's
transformer (ChronoEdit, Helios): a block's attention, feed-forward and modulation, and the time/text
(/image) embedding (standard library only)."""

from __future__ import annotations

from typing import Any, Mapping

from .base import feed_forward, linear


def wan_block(config: Mapping[str, Any], head_scale: int = 0) -> int:
    """One Wan-style block: self-attention and cross-attention (q/k/v/out with biases, RMS q/k norms
    across heads; the image keys and values where ``added_kv_proj_dim`` is set), the cross-attention's
    affine norm (``cross_attn_norm``), the GELU feed-forward, the 6-way scale/shift table;
    ``head_scale``: the history key scale's parameters (Helios' ``is_amplify_history``)."""
    heads, hd = int(config.get("num_attention_heads", 40)), int(config.get("attention_head_dim", 128))
    h = heads * hd
    attention = 4 * linear(h, h) + 2 * h
    added = int(config.get("added_kv_proj_dim") or 0)
    image_kv = 2 * linear(added, h) + h if added else 0
    norm2 = 2 * h if config.get("cross_attn_norm", True) else 0
    return 6 * h + 2 * attention + image_kv + norm2 + feed_forward(h, int(config.get("ffn_dim", 13824))) + head_scale


def wan_embeddings(config: Mapping[str, Any]) -> int:
    """The timestep MLP and its 6-way projection, the text projection, and the CLIP image projection
    (``image_dim``: layer norms around a GELU MLP, with ``pos_embed_seq_len`` positions)."""
    heads, hd = int(config.get("num_attention_heads", 40)), int(config.get("attention_head_dim", 128))
    h = heads * hd
    out = (linear(int(config.get("freq_dim", 256)), h) + linear(h, h) + linear(h, 6 * h)
           + linear(int(config.get("text_dim", 4096)), h) + linear(h, h))
    image = int(config.get("image_dim") or 0)
    if image:  # layer norm, GELU MLP (image -> image -> h), layer norm, positions
        out += (2 * image + linear(image, image) + linear(image, h) + 2 * h
                + int(config.get("pos_embed_seq_len") or 0) * image)
    return out
