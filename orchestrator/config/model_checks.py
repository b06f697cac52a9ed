"""Checks of a job's ``model`` section that the planner repeats on what it resolves:
``model.lora`` (the entries; the files are read by the planner) and ``model.vae_stride``; and
why ``model.weights`` gave the planner no model to take a job's shape from.
"""

from __future__ import annotations

import math
import os
from pathlib import Path
from typing import Any, Optional

from sporch.orchestrator.config.job_spec import ModelSpec
from sporch.orchestrator.contract.vocab import LORA_EXPERTS
from sporch.orchestrator.models.checkpoint_files import CheckpointError, kind


#: The largest ``model.lora[].scale`` either way (W += scale x alpha/rank x up @ down: 1e308 overflows).
MAX_LORA_SCALE = 100.0


def lora_problem(model: ModelSpec) -> Optional[tuple[str, str]]:
    """(key, why) when ``model.lora`` is wrong; the files themselves are read by the planner."""
    for i, entry in enumerate(model.lora or []):
        key = f"model.lora[{i}]"
        if not entry.path or not str(entry.path).strip():
            return f"{key}.path", "is missing; give the adapter's .safetensors file ({path: x.safetensors, scale: 1.0})"
        scale = entry.scale
        if isinstance(scale, bool) or not isinstance(scale, (int, float)) or not math.isfinite(scale):
            return f"{key}.scale", f"must be a number (diffusers' lora_scale, e.g. 1.0), got {scale!r}"
        if abs(scale) > MAX_LORA_SCALE:
            return f"{key}.scale", (f"{scale!r} is out of range: at most {MAX_LORA_SCALE:g} either way (diffusers' "
                                    "lora_scale, usually between 0 and 2)")
        if entry.expert not in LORA_EXPERTS:
            return f"{key}.expert", f"must be one of {', '.join(LORA_EXPERTS)}, got {entry.expert!r}"
    if model.lora and not (model.weights or model.preset):
        return "model.lora", ("needs the model it adapts: set model.weights (a checkpoint) or model.preset; "
                              "a LoRA on a model of made-up shape has nothing to match")
    return None


def vae_stride_problem(value: Any) -> Optional[str]:
    """Why ``model.vae_stride`` is wrong (None when it is three positive ints or unset). The
    planner reads it as [temporal, height, width]; a shorter list would drop the time stride."""
    if value is None:
        return None
    ints = isinstance(value, (list, tuple)) and all(isinstance(s, int) and not isinstance(s, bool) for s in value)
    if ints and len(value) == 3 and min(value) >= 1:
        return None
    return ("must be three positive ints [temporal, height, width], e.g. [4, 8, 8] for a video VAE or "
            f"[1, 8, 8] for an image VAE; got {value!r}")


def weights_without_model(weights: str) -> str:
    """The one-line error for a job without ``model.preset`` whose ``model.weights`` holds no
    config.json the planner can read (nothing there, a dangling link, a FIFO or a device, a
    folder without one): it names ``model.weights`` and what is there, not the model fields a
    job of made-up shape would give."""
    path = Path(weights).expanduser()
    try:
        what = kind(path)
    except CheckpointError as exc:
        what, why = "error", str(exc)
    if what is None:
        why = (f"is a symbolic link to {os.readlink(path)}, which does not exist" if path.is_symlink()
               else "does not exist")
    elif what == "other":
        why = "is not a folder or a regular file (a FIFO, a device or a socket)"
    elif what in ("dir", "file"):
        folder = path if what == "dir" else path.parent
        why = f"has no config.json (looked for {folder / 'transformer' / 'config.json'} and {folder / 'config.json'})"
    return (f"model.weights {weights} {why}, and the job names no model.preset, so nothing says which model to "
            "plan: point model.weights at a diffusers folder (or its transformer/) with its config.json, or set "
            "model.preset (`sporch models` lists them)")
