"""Model presets by name, for planning: a preset's shape and knobs as one ``plan.model`` dict.

The presets themselves (published shapes and architecture knobs, one module per model family)
live in sporch.orchestrator.models, which the runtime reads too. A preset with a
published name (wan2.1-*, flux.1-*) computes that model exactly and loads its published
checkpoints (``model.weights``; docs/model.md); the others are architecture stand-ins with the
shapes of a published model, for planning and benchmarks.

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

from sporch.orchestrator.models import PRESETS, find_preset
from sporch.orchestrator.errors import SporchError

__all__ = ["PRESETS", "get_preset", "preset_names"]


def preset_names() -> list[str]:
    return list(PRESETS)


def get_preset(name: str) -> dict[str, Any]:
    """The preset's shape and knobs in one dict (a copy); SporchError for an unknown name."""
    preset = find_preset(name)
    if preset is None:
        raise SporchError(f"unknown model preset {name!r}; presets: {', '.join(PRESETS)}")
    return preset.as_dict()
