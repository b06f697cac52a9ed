"""LoRA adapters on the generic path: ``plan.model.lora`` merged into a diffusers transformer with
diffusers' and PEFT's own code, before the model is made sequence-parallel.

For each adapter (``{"path", "scale", "expert"}``, as the planner records it):

1. the family's diffusers LoRA loader (``Family.lora_loader``, e.g. ``FluxLoraLoaderMixin``)
   reads the file with its ``lora_state_dict``, which converts the formats diffusers knows for
   that family (kohya / sd-scripts / musubi names, the original release's module names) to
   diffusers' ``transformer.<module>.lora_A/B`` keys, with alphas and metadata;
2. its ``load_lora_into_transformer`` injects PEFT LoRA layers into the model
   (``ModelMixin.load_lora_adapter``); every module the adapter names must get one, else
   :class:`LoraError` names the ones the model lacks (diffusers only warns);
3. ``set_adapters`` gives each adapter its ``scale``; ``fuse_lora`` merges them into the base
   weights (W += scale x alpha/r x B A) and ``unload_lora`` removes the PEFT layers, so the
   model is plain diffusers modules again: the split/gather hooks, compile and the attention
   routing see the same module tree as without LoRA, at no extra cost per step.
"""

from __future__ import annotations

from typing import Any, Mapping, Sequence

import torch

__all__ = ["LoraError", "apply_lora", "adapted_modules"]


class LoraError(ValueError):
    """An adapter the model cannot take (modules it lacks, a file the loader refuses)."""


def adapted_modules(state_dict: Mapping[str, Any], prefix: str) -> set[str]:
    """Module names (without ``prefix.``) that carry a ``lora_A`` in a diffusers-format state dict."""
    out = set()
    for key in state_dict:
        if ".lora_A" not in key:
            continue
        name = key.split(".lora_A", 1)[0]
        out.add(name[len(prefix) + 1:] if name.startswith(prefix + ".") else name)
    return out


def _alphas_apart(loader: type) -> bool:
    """Flux's loader returns the adapters' alphas apart from the state dict (and takes them back)."""
    import inspect

    return "network_alphas" in inspect.signature(loader.load_lora_into_transformer).parameters


def _read(loader: type, path: str) -> tuple[dict, dict | None, dict | None]:
    """(state dict in diffusers keys, network alphas or None, metadata or None), converted by
    the loader's ``lora_state_dict``."""
    if _alphas_apart(loader):
        return loader.lora_state_dict(path, return_alphas=True, return_lora_metadata=True)
    sd, meta = loader.lora_state_dict(path, return_lora_metadata=True)
    return sd, None, meta


def apply_lora(model: torch.nn.Module, adapters: Sequence[Mapping[str, Any]] | None, loader_name: str | None) -> int:
    """Merge ``adapters`` into ``model`` in place (see the module docstring); returns how many
    modules changed. ``loader_name``: the family's diffusers LoRA loader mixin."""
    if not adapters:
        return 0
    if not loader_name:
        raise LoraError(f"{type(model).__name__}: its family names no diffusers LoRA loader; remove model.lora")
    import diffusers.loaders
    from peft.tuners.tuners_utils import BaseTunerLayer

    loader = getattr(diffusers.loaders, loader_name)
    names, scales, changed = [], [], set()
    for i, entry in enumerate(adapters):
        name, path = f"sporch_lora_{i}", str(entry["path"])
        try:
            sd, alphas, meta = _read(loader, path)
        except (ValueError, KeyError) as exc:  # a format the family's converter does not know
            raise LoraError(f"model.lora[{i}] {path}: {loader_name} cannot read it ({exc})") from None
        wanted = adapted_modules(sd, loader.transformer_name)
        if not wanted:
            raise LoraError(f"model.lora[{i}] {path}: no LoRA pairs for the transformer after {loader_name}'s "
                            "conversion (an adapter for the text encoder only?)")
        kw = {"network_alphas": alphas} if _alphas_apart(loader) else {}
        try:
            loader.load_lora_into_transformer(sd, transformer=model, adapter_name=name, metadata=meta, **kw)
        except ValueError as exc:  # PEFT: none of the target modules is in the model
            raise LoraError(f"model.lora[{i}] {path}: {exc}".splitlines()[0]) from None
        got = {n for n, m in model.named_modules() if isinstance(m, BaseTunerLayer) and name in m.lora_A}
        lacking = sorted(wanted - got)
        if lacking:
            raise LoraError(f"model.lora[{i}] {path}: {len(lacking)} adapted module(s) are not in "
                            f"{type(model).__name__} (first: {', '.join(lacking[:3])}); an adapter for another "
                            "model or size?")
        names.append(name)
        scales.append(float(entry.get("scale", 1.0)))
        changed |= got
    model.set_adapters(names, weights=scales)
    model.fuse_lora(adapter_names=names)
    model.unload_lora()
    return len(changed)
