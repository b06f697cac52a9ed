"""The record a family fills for its original release's checkpoint format (standard library only).

A published model whose original release stores its transformer in its own names (Wan-Video's
``WanModel``, Black Forest Labs' Flux) loads into the diffusers class through diffusers' own
single-file converter (``diffusers.loaders.single_file_utils``); the family says how to recognise
such a checkpoint from its tensor names, which converter maps it, and how the release's config.json
(or, where it ships none, the tensors' shapes) becomes the diffusers class's config. The planner
reads these facts from headers and config.json alone (models/checkpoint_format.py); the runtime
runs the converter (runtime/models/original.py).

LoRA adapters trained on the original release name its modules (kohya / sd-scripts, musubi-tuner,
LightX2V): ``lora_names`` lists the class's linear modules with the release's name for each
(:class:`LoraName`), so the planner can check an adapter's targets in diffusers' names and the
runtime can hand diffusers' LoRA loader the adapter in the one key form its converter reads for
the family (``lora_style``; models/lora_names.py).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, Mapping

#: tensor name -> shape, as a safetensors header states it
Shapes = Mapping[str, tuple]


@dataclass(frozen=True)
class LoraName:
    """One linear module of the original release and the diffusers module(s) it is: several for a
    fused one (Flux's q|k|v), cut by rows in ``parts`` (units of the model's width; None: 1:1)."""

    original: str  # with {i} for a block index
    diffusers: tuple[str, ...]
    parts: tuple[int, ...] | None = None
    blocks: str | None = None  # the config key counting the blocks {i} runs over
    when: str | None = None  # a config key that must be set for the module to exist (an optional input)


@dataclass(frozen=True)
class LoraStyle:
    """The key form diffusers' LoRA loader converts for the family when an adapter names the original
    release's modules: ``<prefix><module><sep-joined>.<down>.weight`` / ``.<up>.weight``."""

    prefix: str  # "diffusion_model." (Wan) or "lora_unet_" (Flux, sd-scripts)
    underscored: bool  # module names with dots as underscores (kohya)


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
    #: whether a config.json is the release's own (not a diffusers one), where it ships one
    is_config: Callable[[Mapping[str, Any]], bool] = lambda config: False
    #: prefixes a repackaged checkpoint puts before every name (ComfyUI's ``model.diffusion_model.``);
    #: the converter strips them itself
    prefixes: tuple[str, ...] = ("model.diffusion_model.",)
    #: rows the converter splits at a width of its own (Flux's converter cuts ``linear1`` at
    #: Flux.1's 3072): ``(name pattern with {i}, parts in units of the model's width, the
    #: converter's width)``; for another width sporch pads the parts to the converter's sizes
    #: and drops the padding after (runtime/models/original.py)
    fixed_splits: tuple[tuple[str, tuple[int, ...], int], ...] = field(default_factory=tuple)
    #: the class's linear modules a LoRA may adapt, with the release's names
    lora_names: tuple[LoraName, ...] = field(default_factory=tuple)
    #: the form an adapter in the release's names is handed to diffusers' LoRA loader in
    lora_style: LoraStyle | None = None
    #: why diffusers' LoRA converter for the family cannot read an adapter naming these of the
    #: release's modules (dotted, block indices in place), or None: a rule of that converter's
    #: that sporch refuses at plan time rather than meet at load
    lora_check: Callable[[list], str | None] | None = None
    #: parameters besides the linears' that a whole-tensor difference (LightX2V's ``.diff``,
    #: ``.diff_b``, ``.diff_m``) may change, in the release's names (with {i}; ``blocks``/``when``
    #: as in LoraName); empty: the family takes no differences
    delta_parameters: tuple[LoraName, ...] = field(default_factory=tuple)

    def prefix_of(self, names) -> str | None:
        """The prefix under which ``names`` hold a marker of this format, or None (not this format)."""
        names = set(names)
        for prefix in ("", *self.prefixes):
            if any(prefix + m in names for m in self.markers):
                return prefix
        return None
