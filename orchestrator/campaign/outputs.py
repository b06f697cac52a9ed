"""Same output across layouts: a generate point's output against the campaign's reference point.

A layout changes how the work is split, never what is computed: every layout of one workload
(same prompts, seeds, steps, shape, dtype, weights) must give the same video up to rounding.
For each completed generate point this module reads what its job wrote into its folder
(``latents/<index>.safetensors``, sporch.runtime.pipelines.latent_files; the decoded files of
``result.json``'s ``outputs``) and compares them with the reference point's:

* ``latent_max_abs_err``: the largest ``|a - b|`` over every prompt's final latents;
* ``psnr_db``: the lowest PSNR over the prompts of the decoded frames (uint8, data range 255),
  ``inf`` when they are identical (scikit-image's ``peak_signal_noise_ratio``);
* ``ssim``: the lowest, over the prompts, of the mean SSIM of the frames (scikit-image's
  ``structural_similarity``, ``channel_axis=-1``).

The reference point of a group of comparable points (same cluster, preset, shape, dtype) is
``compare_outputs.reference`` of the campaign file (a point id, or a layout such as
``1x1x1x1``), else the point with the fewest GPUs (first in report order); with speed-lever
axes (``caches``, ``quants``, ``attention_precisions``, ``steps``, ``recipes``), a layout or the
fewest GPUs picks among the full-quality points (cache none, quant none, attention exact, the
most steps, recipe base), so a lossy point's PSNR/SSIM is against the full-quality output (their
latents share the ``subject`` hash, runtime/pipelines/latent_files.py). It gets 0 / inf / 1.
Points whose latents carry another fingerprint (another prompt, seed, steps...) are not
compared: their metrics stay empty and a one-line note says why.

Verify points are not compared here: a verify run's ``max_abs_err`` is already measured
against the unsharded model of the same run (docs/verify.md).

numpy, safetensors, imageio and scikit-image (the ``report`` extra) are imported only when a
campaign has generate points to compare.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Optional, Sequence

#: The metrics this module fills in (metrics.OUTPUT_METRICS).
NAMES = ("latent_max_abs_err", "psnr_db", "ssim")
LATENTS_DIR = "latents"


@dataclass
class Outputs:
    """One point's outputs: prompt index -> (fingerprint, latents) and -> frames [F, H, W, C] uint8."""

    latents: dict
    frames: dict
    subjects: dict = None  # prompt index -> subject hash (runtime/pipelines/latent_files.py), when written


def read_outputs(folder: Path, result: dict[str, Any]) -> Optional[Outputs]:
    """The latents and decoded frames a generate job wrote into ``folder``; None for a point
    that is not a generate one. Missing or unreadable files raise ValueError (the reason)."""
    if result.get("workload") != "generate":
        return None
    import numpy as np
    from safetensors import safe_open

    latents, subjects = {}, {}
    for path in sorted((folder / LATENTS_DIR).glob("*.safetensors")):
        with safe_open(str(path), framework="np") as f:
            meta = f.metadata() or {}
            latents[int(meta.get("index", path.stem))] = (meta.get("fingerprint"), f.get_tensor("latents"))
            subjects[int(meta.get("index", path.stem))] = meta.get("subject")
    frames = {}
    for out in result.get("outputs") or []:
        if not isinstance(out, dict) or not isinstance(out.get("file"), str):
            continue
        frames[int(out.get("index", len(frames)))] = _read_frames(folder / Path(out["file"]).name, np)
    if not latents and not frames:
        raise ValueError(f"no latents ({folder / LATENTS_DIR}) and no decoded outputs to compare")
    return Outputs(latents=latents, frames=frames, subjects=subjects)


def _read_frames(path: Path, np) -> Any:
    import imageio.v3 as iio

    if not path.is_file():
        raise ValueError(f"output {path} is missing")
    arr = np.asarray(iio.imread(path))
    if arr.ndim == 2:  # grey image
        arr = arr[..., None]
    if arr.ndim == 3:  # one image: one frame
        arr = arr[None]
    return arr


def compare(ref: Outputs, got: Outputs) -> dict[str, float]:
    """latent_max_abs_err, psnr_db and ssim of ``got`` against ``ref``; ValueError (why) when
    they are not comparable (other prompts, fingerprints or shapes)."""
    import numpy as np
    from skimage.metrics import peak_signal_noise_ratio, structural_similarity

    out: dict[str, float] = {}
    if ref.latents or got.latents:
        if sorted(ref.latents) != sorted(got.latents):
            raise ValueError(f"latents of prompts {sorted(got.latents)}, the reference has {sorted(ref.latents)}")
        err = 0.0
        for i, (fp, a) in got.latents.items():
            rfp, b = ref.latents[i]
            same_subject = (ref.subjects or {}).get(i) is not None and \
                (ref.subjects or {}).get(i) == (got.subjects or {}).get(i)
            if fp != rfp and not same_subject:
                raise ValueError(f"prompt {i}'s latents have another fingerprint (prompt, seed, steps, shape "
                                 "or weights differ)")
            if a.shape != b.shape:
                raise ValueError(f"prompt {i}'s latents are {list(a.shape)}, the reference's {list(b.shape)}")
            err = max(err, float(np.max(np.abs(a.astype(np.float64) - b.astype(np.float64)))))
        out["latent_max_abs_err"] = err
    if ref.frames or got.frames:
        if sorted(ref.frames) != sorted(got.frames):
            raise ValueError(f"outputs of prompts {sorted(got.frames)}, the reference has {sorted(ref.frames)}")
        psnr, ssim = math.inf, 1.0
        for i, a in got.frames.items():
            b = ref.frames[i]
            if a.shape != b.shape:
                raise ValueError(f"prompt {i}'s frames are {list(a.shape)}, the reference's {list(b.shape)}")
            if not np.array_equal(a, b):
                psnr = min(psnr, float(peak_signal_noise_ratio(b, a, data_range=255)))
                side = min(a.shape[1], a.shape[2])
                win = min(7, side if side % 2 else side - 1)
                ssim = min(ssim, float(np.mean([structural_similarity(b[f], a[f], data_range=255, channel_axis=-1,
                                                                      win_size=win) for f in range(len(a))])))
        out["psnr_db"], out["ssim"] = psnr, ssim
    return out


def pick_reference(rows: Sequence[Any], reference: Optional[str]) -> Optional[Any]:
    """The reference row among comparable ``rows`` (report order): the one whose id or layout is
    ``reference``, else the one with the fewest GPUs."""
    for r in rows:
        if reference and r.id == reference:
            return r
    full = [r for r in rows if is_reference_levers(r.values, rows)]
    rows = full or rows
    if reference:
        return next((r for r in rows if str(r.values.get("layout")) == reference), None)

    def gpus(r) -> float:
        g = r.values.get("gpus")
        return g if isinstance(g, int) and not isinstance(g, bool) else math.inf

    return min(rows, key=gpus) if rows else None


#: A speed lever's value at full quality (the reference point's), per report column.
FULL_QUALITY = {"cache": ("none", ""), "quant": ("none", ""), "attention": ("exact", "")}


def is_reference_levers(values: dict, rows: Sequence[Any]) -> bool:
    """Whether a point runs at full quality: no step cache, full-precision weights, exact
    attention and the most steps (recipe ``base``) among ``rows``."""
    if any(str(values.get(k, "")) not in ok for k, ok in FULL_QUALITY.items()):
        return False
    if str(values.get("recipe", "")) not in ("", "base"):
        return False
    steps = [r.values.get("steps") for r in rows if isinstance(r.values.get("steps"), int)]
    return not steps or values.get("steps") == max(steps)


def fill(rows: Sequence[Any], folders: dict, results: dict, reference: Optional[str]) -> None:
    """Set each completed generate row's output metrics (and ``output_note`` when it cannot be
    compared) against its group's reference. ``folders``/``results``: row id -> point folder /
    result.json dict."""
    groups: dict[tuple, list] = {}
    for r in rows:
        if r.ok and results.get(r.id, {}).get("workload") == "generate":
            key = tuple(str(r.values.get(k)) for k in ("cluster", "preset", "shape", "dtype"))  # caches: one group
            groups.setdefault(key, []).append(r)
    for members in groups.values():
        ref = pick_reference(members, reference)
        if ref is None:
            for r in members:
                r.output_note = f"no completed point {reference!r} to compare outputs with"
            continue
        try:
            ref_out = read_outputs(folders[ref.id], results[ref.id])
        except (OSError, ValueError) as exc:
            for r in members:
                r.output_note = f"reference point {ref.id}: {exc}"
            continue
        for r in members:
            try:
                got = ref_out if r is ref else read_outputs(folders[r.id], results[r.id])
                r.metrics.update(compare(ref_out, got))
                r.output_ref = ref.id
            except (OSError, ValueError) as exc:
                r.output_note = f"outputs not compared with reference point {ref.id}: {exc}"
