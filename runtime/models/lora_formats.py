"""A LoRA file as the family's diffusers loader mixin reads it: the adapter's tensors (views of the
memory-mapped file), its keys in the form diffusers' converter for the family takes, and the
whole-tensor differences diffusers drops, in the diffusers class's parameter names.

:func:`read_adapter` runs, for one ``plan.model.lora`` entry:

1. ``read_lora`` (models/lora_file.py): the header checked as at plan time (one line for a bad
   file); for a family with the release's names (Wan, Flux) ``lora_plan`` (models/lora_names.py)
   matches the modules against the model's config and says how to hand them to diffusers;
2. the family's key form applied: down/up keys renamed (pure renames: the tensors are the file's),
   a per-module ``.alpha`` tensor folded into its down matrix (x alpha / rank, in float32), so that
   diffusers' converter reads every module with its alpha;
3. the loader's ``lora_state_dict`` converts those keys (diffusers' own code: Wan's original-name
   converter, Flux's sd-scripts converter with its q|k|v cuts and swapped final modulation), with
   the file's ``lora_adapter_metadata`` (PEFT alphas) as diffusers reads it; the keys of Flux's root
   modules, which that converter leaves without the ``transformer.`` prefix (so diffusers' own
   pipeline drops them: the embedders, the final layer), get it back;
4. whole-tensor differences (LightX2V: ``.diff`` a weight, ``.diff_b`` a bias, ``.diff_m`` a block's
   modulation table; diffusers keeps only some ``diff_b`` as LoRA biases and drops the rest) are
   renamed to the class's parameters by the family's single-file checkpoint converter (the same
   renames the release's checkpoints get) and returned apart: the caller adds
   ``P += scale x delta``.

A family without the release's names (Qwen-Image, ...) has its file handed to the loader as it is
(its header checked by the planner; the loader reads what PEFT takes, ``lora_B`` biases too).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Mapping, Optional

import torch

from sporch.orchestrator.models.checkpoint_files import CheckpointError, CheckpointFiles
from sporch.orchestrator.models.checkpoint_format import ORIGINAL_FORMATS
from sporch.orchestrator.models.lora_file import read_lora
from sporch.orchestrator.models.lora_names import lora_plan

from sporch.runtime.models.mapped import MappedCheckpoint
from sporch.runtime.models.split_plans import diffusers_type

__all__ = ["LoraError", "Adapter", "read_adapter"]


class LoraError(CheckpointError):
    """An adapter the model cannot take (modules it lacks, a file the loader refuses): bad input,
    one line."""


@dataclass
class Adapter:
    """One adapter as diffusers' loader converted it."""

    where: str  # "model.lora[i] <path>", for messages
    state_dict: dict  # diffusers' keys: transformer.<module>.lora_A/B...
    alphas: Optional[dict]  # network alphas (Flux's loader returns them apart), or None
    metadata: Optional[dict]  # the file's lora_adapter_metadata, as diffusers parsed it
    deltas: dict[str, torch.Tensor] = field(default_factory=dict)  # class parameter -> whole-tensor difference


def _alphas_apart(loader: type) -> bool:
    """Flux's loader returns the adapters' alphas apart from the state dict (and takes them back)."""
    import inspect

    return "network_alphas" in inspect.signature(loader.load_lora_into_transformer).parameters


def _convert(loader: type, source: Any) -> tuple[dict, Optional[dict], Optional[dict]]:
    """(state dict, alphas, metadata) from the loader's ``lora_state_dict`` of ``source`` (a path or a dict)."""
    if _alphas_apart(loader):
        return loader.lora_state_dict(source, return_alphas=True, return_lora_metadata=True)
    sd, meta = loader.lora_state_dict(source, return_lora_metadata=True)
    return sd, None, meta


def _file_metadata(path: str) -> Optional[dict]:
    """The file's ``lora_adapter_metadata`` as diffusers parses it when it reads the file itself."""
    from diffusers.loaders.lora_base import _load_sft_state_dict_metadata

    return _load_sft_state_dict_metadata(path)


def _deltas(family: str, names: Mapping[str, str], tensors: Mapping[str, torch.Tensor], where: str) -> dict[str, torch.Tensor]:
    """The differences ``{file key: release parameter}`` renamed by the family's checkpoint converter."""
    if not names:
        return {}
    from diffusers.loaders import single_file_utils

    converter = getattr(single_file_utils, ORIGINAL_FORMATS[family].converter)
    by_param = {param: tensors[key] for key, param in names.items()}
    out = converter(dict(by_param))
    if len(out) != len(by_param):
        raise LoraError(f"{where}: diffusers' converter maps {len(out)} of its {len(by_param)} difference tensors; the "
                        "adapter is for another model")
    return out


def read_adapter(model: torch.nn.Module, family: str, loader: type, index: int, entry: Mapping[str, Any]) -> Adapter:
    """The ``index``-th entry of ``plan.model.lora`` for ``model`` (its diffusers family ``family``
    and loader mixin ``loader``), converted (module docstring)."""
    path = str(entry["path"])
    where = f"model.lora[{index}] {path}"
    fmt = ORIGINAL_FORMATS.get(family)
    if fmt is None or not fmt.lora_names:  # the file as it is (its header checked at plan time)
        try:
            sd, alphas, meta = _convert(loader, path)
        except (ValueError, KeyError) as exc:  # a format the family's converter does not know
            raise LoraError(f"{where}: {loader.__name__} cannot read it ({exc})".splitlines()[0]) from None
        return Adapter(where, sd, alphas, meta)
    config = {**dict(model.config), "_class_name": diffusers_type(type(model)).__name__}
    try:
        lora = read_lora(path)
        plan = lora_plan(lora, family, config, where)
        files = CheckpointFiles(root=lora.path.parent, files=[lora.path], tensors=lora.tensors)
        with MappedCheckpoint(files) as mapped:  # the header read_lora checked
            tensors = mapped.state_dict()
    except CheckpointError as exc:
        raise LoraError(str(exc)) from None
    state = {}
    for old, new in plan.renames.items():
        value = tensors[old]
        if old in plan.folds:  # W += (alpha / r) up @ down: the factor carried by down
            alpha = float(tensors[plan.folds[old]].float().reshape(-1)[0])
            value = value.float() * (alpha / value.shape[0])
        state[new] = value
    try:
        sd, alphas, _ = _convert(loader, state) if state else ({}, None, None)
    except (ValueError, KeyError, AssertionError) as exc:  # a form diffusers' converter cannot read after all
        raise LoraError(f"{where}: {loader.__name__} cannot read it ({exc})".splitlines()[0]) from None
    prefix = loader.transformer_name + "."
    # diffusers' sd-scripts Flux converter leaves the root modules (embedders, final layer) without the
    # prefix, so its own pipeline drops them; the transformer's they are
    sd = {k if k.startswith((prefix, "text_encoder")) else prefix + k: v for k, v in sd.items()}
    if alphas:
        alphas = {k if k.startswith((prefix, "text_encoder")) else prefix + k: v for k, v in alphas.items()}
    metadata = _file_metadata(path) if state and not plan.folds else None  # alphas folded: none to read twice
    return Adapter(where, sd, alphas, metadata,
                   _deltas(family, plan.deltas, tensors, where))
