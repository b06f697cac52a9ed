"""The models sporch knows, and the readers of their files (standard library only; both sides
read it: the orchestrator on a login node or a laptop, the runtime on every rank).

The named models:

One module per published family holds everything about it: wan.py (Wan2.1), flux.py
(Flux.1): each model's shape and knobs (:class:`~.preset.ModelPreset`) and the family's
checkpoint name table (``TABLE``, :mod:`.keymap`). standins.py holds the shape-only presets
(architecture stand-ins for planning, ``tiny`` for tests).

The orchestrator plans with a preset's shape and knobs (sporch.orchestrator.config.presets);
the runtime's ModelConfig takes the knobs by preset name and loads checkpoints with the
family's table (sporch.runtime.model.config, sporch.runtime.model.keymaps). :mod:`.families`
holds every family fact (one module per family, one registry).

The readers, no tensor loaded: :mod:`.checkpoint_files` (where a checkpoint's tensors are:
safetensors headers, index), :mod:`.checkpoint_config` (the model a config.json describes),
:mod:`.checkpoint_experts` (a pipeline folder's two experts), the LoRA adapters' (:mod:`.lora_file`
the file read and checked, :mod:`.lora_keys` its key formats, :mod:`.lora_alpha` its alphas,
:mod:`.lora_targets` where its modules land, :mod:`.lora_module_names` what a plan's model offers,
:mod:`.lora_experts` which expert an entry adapts, :mod:`.lora_report` what inspect says),
:mod:`.finite` (NaN/inf counted from a tensor's bytes), :mod:`.generate_inputs`
(what a generate job needs on disk: pipeline folders, prompts).
"""

from __future__ import annotations

from sporch.orchestrator.models import families
from sporch.orchestrator.models import flux, standins, wan
from sporch.orchestrator.models.preset import ModelPreset

#: The generic path's published presets (models/families: one module per family).
GENERIC_PRESETS: dict[str, ModelPreset] = {
    p.name: ModelPreset(shape=fam.shape(p.config)) for fam in families.FAMILIES if not fam.hand_built
    for p in fam.presets}
#: Every preset by name (lower case): the published models first, then the stand-ins.
PRESETS: dict[str, ModelPreset] = {**wan.PRESETS, **flux.PRESETS, **GENERIC_PRESETS, **standins.PRESETS}


def preset_family(name: str | None) -> str | None:
    """The family (models/families name) of preset ``name``; None for a stand-in."""
    key = str(name or "").strip().lower()
    if key in wan.PRESETS:
        return "wan"
    if key in flux.PRESETS:
        return "flux"
    found = families.generic_preset(key)
    return found[0].name if found else None


def find_preset(name: str | None) -> ModelPreset | None:
    """The preset called ``name`` (case and surrounding blanks ignored), or None."""
    return PRESETS.get(str(name or "").strip().lower())


def preset_knobs(name: str | None) -> dict[str, object]:
    """The knobs of preset ``name`` ({} for a stand-in, an unknown name or None)."""
    preset = find_preset(name)
    return dict(preset.knobs) if preset is not None else {}


__all__ = ["ModelPreset", "PRESETS", "GENERIC_PRESETS", "find_preset", "preset_knobs", "preset_family", "flux",
           "standins", "wan"]
