"""Writing and reading the outputs with imageio: MP4 (H.264 through imageio-ffmpeg's own
ffmpeg binary) for videos, PNG for images. Frames are float in [0, 1], [F, H, W, 3]."""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np

from sporch.orchestrator.safe_files import output_file, read_regular


def to_uint8(frames: np.ndarray) -> np.ndarray:
    return (np.clip(frames, 0.0, 1.0) * 255.0).round().astype(np.uint8)


def output_name(index: int, prompt: str, fmt: str) -> str:
    """``0003-a-red-fox-in-snow.mp4``: the prompt's index, then a slug of its first words."""
    slug = re.sub(r"[^a-z0-9]+", "-", prompt.lower()).strip("-")[:40].rstrip("-") or "prompt"
    return f"{index:04d}-{slug}.{fmt}"


def write(path: Path, frames: np.ndarray, fmt: str, fps: int = 16) -> Path:
    """Write [F, H, W, 3] frames; atomically, never through a link: ffmpeg writes into a private
    folder sporch created beside ``path`` (a random name, mode 0700), then the file is renamed
    over ``path`` (a link there is replaced, never followed; safe_files.output_file)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    if fmt not in ("mp4", "png"):
        raise ValueError(f"unknown output format {fmt!r} (mp4 | png)")
    with output_file(path, replace=True) as tmp:  # same name: ffmpeg picks the container from its extension
        _write_frames(tmp, to_uint8(frames), fmt, fps)
    return path


def _write_frames(tmp: Path, data: np.ndarray, fmt: str, fps: int) -> None:
    import imageio.v3 as iio

    if fmt == "mp4":
        # macro_block_size=1: keep the exact size (the default would resize to multiples of 16)
        iio.imwrite(tmp, data, extension=".mp4", plugin="FFMPEG", fps=fps, codec="libx264",
                    macro_block_size=1, quality=8)
    elif fmt == "png":
        if data.shape[0] != 1:
            raise ValueError(f"png holds one image, got {data.shape[0]} frames: use output_format mp4")
        iio.imwrite(tmp, data[0], extension=".png")


def read(path: Path) -> np.ndarray:
    """Frames [F, H, W, 3] uint8 of an MP4 or PNG written by :func:`write`."""
    import imageio.v3 as iio

    if Path(path).suffix == ".mp4":
        return np.asarray(iio.imread(path, plugin="FFMPEG", index=None))
    return np.asarray(iio.imread(path))[None]


def load_image(path: str | Path):
    """``workload.image`` as the RGB PIL image the pipelines take (diffusers' ``load_image``, read
    from a regular file only: a FIFO would block)."""
    import io

    from diffusers.utils import load_image as diffusers_load_image
    from PIL import Image


    return diffusers_load_image(Image.open(io.BytesIO(read_regular(Path(path).expanduser()))))
