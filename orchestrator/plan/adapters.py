"""``model.lora``: the job's LoRA adapters, checked against its model at plan time (no torch).

Each file's header is read (sporch.orchestrator.models.lora_file): its format, and every
module it adapts mapped onto the model's diffusers class (for Wan and Flux by
models/lora_names.py: the key plan the runtime hands diffusers' LoRA loader), so an adapter for
another model, size or family is refused by
``sporch plan`` in one line. The plan carries absolute paths and scales
(``plan.model.lora``, each with the expert it adapts: ``both``, or one of Wan2.2's
``transformer``/``transformer_2``); the runtime merges them at load (runtime/models/lora.py).
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any, Optional, Sequence

from sporch.orchestrator.config.job import job_relative
from sporch.orchestrator.models.checkpoint_files import CheckpointError, open_checkpoint
from sporch.orchestrator.models.checkpoint_format import checkpoint_format
from sporch.orchestrator.models.families import require_family
from sporch.orchestrator.models.lora_file import read_lora
from sporch.orchestrator.models.lora_names import lora_plan
from sporch.orchestrator.contract.sections import ModelSection
from sporch.orchestrator.errors import SporchError


def lora_path(path: str, source: Optional[str]) -> str:
    """Absolute: ``~`` expanded; a relative path is relative to the job file's folder."""
    return str(Path(job_relative(path, source)).expanduser().resolve())


def check_lora_family(model: ModelSection):
    """The model's family, when its classes take LoRA adapters (a diffusers LoRA loader); else the
    one-line refusal (before any adapter file is read)."""
    fam = require_family(model.diffusers_class)
    if not fam.lora_loader:
        raise SporchError(f"model.lora is not supported for {model.diffusers_class} (family {fam.name}: no diffusers "
                          "LoRA loader); remove model.lora")
    return fam


def with_lora(model: ModelSection, entries: Optional[Sequence[Any]], source: Optional[str] = None) -> ModelSection:
    """``model`` with ``plan.model.lora`` set from the job's ``model.lora`` entries (each
    ``path``/``scale``/``expert``): each file's header checked (LoRA pairs of one rank, no
    text-encoder keys); for a family whose original release sporch knows (Wan, Flux) every module
    matched in diffusers' or the release's names against the class's linear modules for the
    model's config, and whole-tensor differences against its parameters (models/lora_names.py:
    what the runtime hands diffusers' loader, runtime/models/lora.py, which refuses again
    whatever the model lacks)."""
    if not entries:
        return model
    fam = check_lora_family(model)
    try:
        config = {"_class_name": model.diffusers_class, **_generic_config(model)}
    except CheckpointError as exc:
        raise SporchError(str(exc)) from None
    out = []
    for i, e in enumerate(entries):
        path = lora_path(str(e.path), source)
        if e.expert != "both" and model.experts < 2:
            raise SporchError(f"model.lora[{i}].expert {e.expert} picks one of two experts, but the model "
                              f"({model.preset or 'from model.weights'}) has one transformer; remove it")
        try:
            lora_plan(read_lora(path), fam.name, config, where=f"model.lora[{i}] {path}")
        except CheckpointError as exc:
            raise SporchError(str(exc)) from None
        out.append({"path": path, "scale": float(e.scale), "expert": e.expert})
    return dataclasses.replace(model, lora=out)


def _generic_config(model: ModelSection) -> dict:
    """The diffusers config of the plan's model: recorded (a preset), else the checkpoint's (its
    config.json, or an original release's mapped: models/checkpoint_format.py; headers only)."""
    if model.diffusers_config:
        return dict(model.diffusers_config)
    if not model.weights:
        return {}
    return dict(checkpoint_format(open_checkpoint(model.weights)).config)
