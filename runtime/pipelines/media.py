"""Writing and reading the outputs with imageio: MP4 (H.264 through imageio-ffmpeg's own
ffmpeg binary) for videos, PNG for images. Frames are float in [0, 1], [F, H, W, 3]."""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np


def to_uint8(frames: np.ndarray) -> np.ndarray:
    return (np.clip(frames, 0.0, 1.0) * 255.0).round().astype(np.uint8)


def output_name(index: int, prompt: str, fmt: str) -> str:
    """``0003-a-red-fox-in-snow.mp4``: the prompt's index, then a slug of its first words."""
    slug = re.sub(r"[^a-z0-9]+", "-", prompt.lower()).strip("-")[:40].rstrip("-") or "prompt"
    return f"{index:04d}-{slug}.{fmt}"


def write(path: Path, frames: np.ndarray, fmt: str, fps: int = 16) -> Path:
    """Write [F, H, W, 3] frames; atomically (a temporary name, then rename)."""
    import imageio.v3 as iio

    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".part-{path.name}")  # keeps the extension: ffmpeg picks the container from it
    data = to_uint8(frames)
    if fmt == "mp4":
        # macro_block_size=1: keep the exact size (the default would resize to multiples of 16)
        iio.imwrite(tmp, data, extension=".mp4", plugin="FFMPEG", fps=fps, codec="libx264",
                    macro_block_size=1, quality=8)
    elif fmt == "png":
        if data.shape[0] != 1:
            raise ValueError(f"png holds one image, got {data.shape[0]} frames: use output_format mp4")
        iio.imwrite(tmp, data[0], extension=".png")
    else:
        raise ValueError(f"unknown output format {fmt!r} (mp4 | png)")
    tmp.replace(path)
    return path


def read(path: Path) -> np.ndarray:
    """Frames [F, H, W, 3] uint8 of an MP4 or PNG written by :func:`write`."""
    import imageio.v3 as iio

    if Path(path).suffix == ".mp4":
        return np.asarray(iio.imread(path, plugin="FFMPEG", index=None))
    return np.asarray(iio.imread(path))[None]
