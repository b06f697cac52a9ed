"""Checks of a job's ``model`` section that the planner repeats on what it resolves:
``model.lora`` (the entries; the files are read by the planner) and ``model.vae_stride``.
"""

from __future__ import annotations

import math
from typing import Any, Optional

from sporch.orchestrator.config.job_spec import ModelSpec
from sporch.orchestrator.contract.vocab import LORA_EXPERTS


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
