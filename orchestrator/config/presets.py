"""Model presets by name, for planning: a preset's ``plan.model`` shape as one dict.

The presets themselves (published configs with their sources, one module per model family) live
in sporch.orchestrator.models.families, which the runtime reads too. Every preset runs its
family's diffusers class: a published name (wan2.1-*, flux.1-*, qwen-image, ...) with its
published config, loading its published checkpoints (``model.weights``; docs/model.md), and the
test models (``tiny``: Wan, ``tiny-flux``: Flux) with tiny configs and random weights.

Keys match ``plan.model`` (docs/contracts.md). ``ffn_dim`` is the FFN inner width;
``patch`` is [pt, ph, pw] and ``vae_stride`` [st, sh, sw] (image models: pt = st = 1).
"""

from __future__ import annotations

from typing import Any

from sporch.orchestrator.models import PRESETS, find_preset
from sporch.orchestrator.errors import SporchError

__all__ = ["PRESETS", "get_preset", "preset_names"]


def preset_names() -> list[str]:
    return list(PRESETS)


def get_preset(name: str) -> dict[str, Any]:
    """The preset's shape (a copy); SporchError for an unknown name."""
    shape = find_preset(name)
    if shape is None:
        raise SporchError(f"unknown model preset {name!r}; presets: {', '.join(PRESETS)}")
    return shape
