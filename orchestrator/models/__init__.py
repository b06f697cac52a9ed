"""The models sporch knows, and the readers of their files (standard library only; both sides
read it: the orchestrator on a login node or a laptop, the runtime on every rank).

The named models: :mod:`.families` holds every family fact, one module per family (its diffusers
classes, its presets with their published configs and sources, its pipeline and its parts), found
by one registry. Every model runs through its family's diffusers class (runtime/models).

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

from typing import Any, Optional

from sporch.orchestrator.models import families

#: Every preset's ``plan.model`` shape fields by name (lower case), in the families' order.
PRESETS: dict[str, dict[str, Any]] = {p.name: families.preset_shape(fam, p) for fam in families.FAMILIES
                                      for p in fam.presets}


def preset_family(name: str | None) -> Optional[str]:
    """The family (models/families name) of preset ``name``; None for an unknown name."""
    found = families.find_family_preset(str(name or ""))
    return found[0].name if found else None


def find_preset(name: str | None) -> Optional[dict[str, Any]]:
    """The shape of the preset called ``name`` (case and surrounding blanks ignored; a copy), or None."""
    shape = PRESETS.get(str(name or "").strip().lower())
    return dict(shape) if shape is not None else None


__all__ = ["PRESETS", "find_preset", "preset_family", "families"]
