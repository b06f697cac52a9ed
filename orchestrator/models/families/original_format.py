"""The record a family fills for its original release's checkpoint format (standard library only).

A published model whose original release stores its transformer in its own names (Wan-Video's
``WanModel``, Black Forest Labs' Flux) loads into the diffusers class through diffusers' own
single-file converter (``diffusers.loaders.single_file_utils``); the family says how to recognise
such a checkpoint from its tensor names, which converter maps it, and how the release's config.json
(or, where it ships none, the tensors' shapes) becomes the diffusers class's config. The planner
reads these facts from headers and config.json alone (models/checkpoint_format.py); the runtime
runs the converter (runtime/model/generic/original.py).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, Mapping

#: tensor name -> shape, as a safetensors header states it
Shapes = Mapping[str, tuple]


@dataclass(frozen=True)
class OriginalFormat:
    #: the release whose names these are (for messages): "Wan-Video/Wan2.1 (WanModel)"
    release: str
    #: the diffusers class the converter's output fills
    class_name: str
    #: tensor names (without ``prefixes``) only this format has: one present means the format
    markers: tuple[str, ...]
    #: the function of ``diffusers.loaders.single_file_utils`` that maps the names
    converter: str
    #: ``(config.json of the release or {}, shapes) -> the diffusers config`` (a one-line
    #: CheckpointError for a model the class cannot be)
    diffusers_config: Callable[[Mapping[str, Any], Shapes], dict]
    #: prefixes a repackaged checkpoint puts before every name (ComfyUI's ``model.diffusion_model.``);
    #: the converter strips them itself
    prefixes: tuple[str, ...] = ("model.diffusion_model.",)
    #: rows the converter splits at a width of its own (Flux's converter cuts ``linear1`` at
    #: Flux.1's 3072): ``(name pattern with {i}, parts in units of the model's width, the
    #: converter's width)``; for another width sporch pads the parts to the converter's sizes
    #: and drops the padding after (runtime/model/generic/original.py)
    fixed_splits: tuple[tuple[str, tuple[int, ...], int], ...] = field(default_factory=tuple)

    def prefix_of(self, names) -> str | None:
        """The prefix under which ``names`` hold a marker of this format, or None (not this format)."""
        names = set(names)
        for prefix in ("", *self.prefixes):
            if any(prefix + m in names for m in self.markers):
                return prefix
        return None
