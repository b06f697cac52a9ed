"""3D rotary position embedding over a (frames, height, width) token grid.

``head_dim`` is split into three even parts, one per axis (time gets the remainder, as in
Wan2.1: h = w = 2*(head_dim//6), t = head_dim - h - w). Rotation pairs are adjacent channels
(2i, 2i+1). Positions come from *global* token indices, so a sequence shard gets exactly the
angles its tokens have in the unsharded sequence.
"""

from __future__ import annotations

import torch


def axis_dims(head_dim: int, axes=None) -> tuple[int, int, int]:
    """(t, h, w) channels of each axis: ``axes`` when given (Flux: (16, 56, 56)), else Wan's split."""
    if axes is not None:
        return tuple(int(a) for a in axes)  # type: ignore[return-value]
    if head_dim % 2:
        raise ValueError("head_dim must be even")
    hw = 2 * (head_dim // 6)
    t = head_dim - 2 * hw
    return t, hw, hw


def grid_positions(token_index: torch.Tensor, grid: tuple[int, int, int] | list[int],
                   seq_len: int | None = None) -> torch.Tensor:
    """(f, h, w) integer positions [N, 3] of flat token indices on ``grid`` (f-major, w-minor).
    Indices at or past ``seq_len`` (padding) get position (0, 0, 0)."""
    f, h, w = (int(g) for g in grid)
    n = f * h * w if seq_len is None else int(seq_len)
    idx = token_index.to(torch.long)
    idx = torch.where(idx < n, idx, torch.zeros_like(idx))
    return torch.stack([idx // (h * w), (idx // w) % h, idx % w], dim=-1)


def rope_angles(positions: torch.Tensor, head_dim: int, theta: float = 10000.0, axes=None) -> torch.Tensor:
    """Rotation angles [N, head_dim // 2] (float64 for accuracy) for positions [N, 3]."""
    parts = []
    for axis, dim in enumerate(axis_dims(head_dim, axes)):
        if dim == 0:
            continue
        inv = 1.0 / (theta ** (torch.arange(0, dim, 2, dtype=torch.float64, device=positions.device) / dim))
        parts.append(positions[:, axis].to(torch.float64)[:, None] * inv[None])
    return torch.cat(parts, dim=-1)


def rope_cos_sin(token_index: torch.Tensor, grid, head_dim: int, seq_len: int | None = None,
                 theta: float = 10000.0, axes=None) -> tuple[torch.Tensor, torch.Tensor]:
    """cos, sin [N, head_dim // 2] float32 for the given global token indices."""
    ang = rope_angles(grid_positions(token_index, grid, seq_len), head_dim, theta, axes)
    return torch.cos(ang).float(), torch.sin(ang).float()


def apply_rope(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """Rotate x [B, N, H, D] by angles (cos/sin [N, D/2] float32); computed in float32, the
    result rounded to x's dtype once. x is not copied to float32 first: a bf16 x times the
    float32 cos promotes exactly, and the two rotated halves are written straight into the
    output (no float32 stack of the whole tensor)."""
    pairs = x.unflatten(-1, (-1, 2))
    x0, x1 = pairs[..., 0], pairs[..., 1]
    c = cos[None, :, None, :]
    s = sin[None, :, None, :]
    out = torch.empty(pairs.shape, dtype=x.dtype, device=x.device)
    out[..., 0] = x0 * c - x1 * s
    out[..., 1] = x0 * s + x1 * c
    return out.flatten(-2)
