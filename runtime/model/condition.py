"""What a model is conditioned on, in one value that batches, slices and moves like a tensor.

A condition is either one tensor (text embeddings [B, T, text_dim], or class labels [B]) or,
for models with more inputs, a dict of tensors with batch first:

* ``text``    [B, T, text_dim]   text-encoder tokens (T5 / umT5)
* ``pooled``  [B, pooled_dim]    pooled text vector (Flux: CLIP)
* ``image``   [B, L, image_dim]  CLIP image tokens (Wan I2V)
* ``latents`` [B, C, F, H, W]    per-pixel latent condition concatenated to the noisy latents
  along channels (Wan I2V: mask + first-frame latents); sharded with the latents' tokens.
"""

from __future__ import annotations

from typing import Callable, Union

import torch

Condition = Union[torch.Tensor, dict[str, torch.Tensor]]


def cond_map(cond: Condition, fn: Callable[[torch.Tensor], torch.Tensor]) -> Condition:
    if isinstance(cond, dict):
        return {k: fn(v) for k, v in cond.items()}
    return fn(cond)


def cond_rows(cond: Condition, rows: slice) -> Condition:
    """Rows ``rows`` of the batch."""
    return cond_map(cond, lambda t: t[rows])


def cond_cat(a: Condition, b: Condition) -> Condition:
    """Two conditions as one doubled batch (a first)."""
    if isinstance(a, dict):
        return {k: torch.cat([a[k], b[k]]) for k in a}
    return torch.cat([a, b])


def cond_text(cond: Condition) -> torch.Tensor:
    return cond["text"] if isinstance(cond, dict) else cond


def cond_to(cond: Condition, device: torch.device, dtype: torch.dtype) -> Condition:
    """Floating tensors to ``dtype`` on ``device``; integer labels keep their dtype."""
    return cond_map(cond, lambda t: t.to(device=device, dtype=dtype) if t.is_floating_point() else t.to(device))
