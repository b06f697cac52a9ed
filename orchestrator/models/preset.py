"""One named model: the shape the planner resolves, and the facts that come with the name."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Mapping


@dataclass(frozen=True)
class ModelPreset:
    """``shape``: ``plan.model`` keys (docs/contracts.md) that the planner resolves and a job
    may override (depth, hidden, num_heads, patch, vae_stride, ...). ``knobs``: architecture
    facts of a published model that come with its name and are not shape keys of the plan
    (rope_axes, pooled_dim, image_dim, eps, freq_dim, ...), and its guidance kind
    (``distilled``, ``guidance_embed``, which the plan's model section also carries)."""

    shape: Mapping[str, Any]
    knobs: Mapping[str, Any] = field(default_factory=dict)

    def as_dict(self) -> dict[str, Any]:
        """Shape and knobs in one dict (a copy)."""
        return {**self.shape, **self.knobs}
