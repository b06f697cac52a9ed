"""The workload's token count and grid: ``sequence_shape(model, WorkloadSpec) -> (tokens, grid)``.

A video or image shape becomes latent frames x rows x columns of patches; a bare ``seq_len`` becomes
the squarest grid of that many tokens. Every axis stays within the class's RoPE table
(``rope_max_seq_len``), or the shape is refused in one line.
"""

from __future__ import annotations

import math
from typing import Optional

from sporch.orchestrator.config.job_spec import WorkloadSpec
from sporch.orchestrator.contract.sections import ModelSection
from sporch.orchestrator.errors import SporchError


def latent_frames(frames: int, st: int) -> int:
    if (frames - 1) % st:
        k = (frames - 1) // st
        raise SporchError(
            f"workload.frames {frames} must be 1 + a multiple of the VAE time stride {st} "
            f"(e.g. {st * k + 1} or {st * (k + 1) + 1})"
        )
    return (frames - 1) // st + 1


def check_side(key: str, size: int, stride: int, patch: int) -> None:
    if size % (stride * patch):
        step = stride * patch
        lo = size // step * step
        raise SporchError(
            f"workload.{key} {size} must be a multiple of VAE stride {stride} x patch {patch} = {step} "
            f"(e.g. {lo or step} or {lo + step})"
        )


def sequence_shape(model: ModelSection, workload: WorkloadSpec) -> tuple[int, list[int]]:
    """(latent tokens, grid [f, h, w]) for the workload's video/image shape.

    latent frames = (frames - 1) // st + 1, latent h = height // sh, w = width // sw;
    tokens = (lf // pt) * (lh // ph) * (lw // pw).
    """
    if workload.seq_len is not None:
        n = int(workload.seq_len)
        return n, _seq_len_grid(model, n)
    st, sh, sw = model.vae_stride
    pt, ph, pw = model.patch
    frames = workload.frames if workload.frames is not None else 1
    lf = latent_frames(frames, st)
    check_side("height", workload.height, sh, ph)
    check_side("width", workload.width, sw, pw)
    if lf % pt:
        raise SporchError(
            f"latent frames {lf} (from {frames} frames, VAE stride {st}) must be a multiple of the time patch {pt}"
        )
    grid = _within_rope(model, [lf // pt, workload.height // sh // ph, workload.width // sw // pw])
    return grid[0] * grid[1] * grid[2], grid


def _rope_limit(model: ModelSection) -> Optional[int]:
    limit = (model.diffusers_config or {}).get("rope_max_seq_len")
    return limit if isinstance(limit, int) else None


def _squarest(m: int) -> int:
    """The largest divisor of ``m`` not above its square root (the short side of its squarest grid)."""
    return max(d for d in range(1, math.isqrt(m) + 1) if m % d == 0)


def token_grid(n: int, limit: Optional[int]) -> Optional[list[int]]:
    """The squarest one-frame grid [1, h, w] of ``n`` tokens; if an axis would pass ``limit``, the fewest frames
    [f, h, w] that keep every axis within it; None when no grid fits."""
    for f in range(1, (n if limit is None else min(n, limit)) + 1):
        if n % f == 0:
            h = _squarest(n // f)
            if limit is None or n // f // h <= limit:
                return [f, h, n // f // h]
    return None


def _seq_len_grid(model: ModelSection, n: int) -> list[int]:
    """A sequence length's token grid: one frame, as square as the length divides, within the RoPE table."""
    limit = _rope_limit(model)
    grid = token_grid(n, limit)
    if grid is not None:
        return grid
    # the nearest lengths below and above that have one (a power of two above does, while it fits 3 axes)
    near = [m for m in (next((m for m in range(n - 1, 0, -1) if token_grid(m, limit)), None),
                        next((m for m in range(n + 1, 2 * n + 2) if token_grid(m, limit)), None)) if m]
    raise SporchError(
        f"workload.seq_len {n} has no token grid (frames x height x width) with every axis within the model's "
        f"rope_max_seq_len {limit}; use a length that factors, e.g. {' or '.join(map(str, near))}"
    )


def _within_rope(model: ModelSection, grid: list[int]) -> list[int]:
    """``grid``, or the refusal of an axis longer than the class's RoPE table (``rope_max_seq_len``)."""
    limit = _rope_limit(model)
    if limit is not None and max(grid) > limit:
        raise SporchError(f"the token grid {grid} (frames x height x width) passes the model's rope_max_seq_len "
                          f"{limit} on an axis; make the video smaller")
    return grid
