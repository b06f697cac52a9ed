"""LoRA adapters on the one model path: ``plan.model.lora`` merged into a diffusers transformer with
diffusers' and PEFT's own code, before the model is made sequence-parallel.

For each adapter (``{"path", "scale", "expert"}``, as the planner records it):

1. the family's diffusers LoRA loader (``Family.lora_loader``, e.g. ``FluxLoraLoaderMixin``)
   reads the file with its ``lora_state_dict``, which converts the formats diffusers knows for
   that family (kohya / sd-scripts / musubi names, the original release's module names) to
   diffusers' ``transformer.<module>.lora_A/B`` keys, with alphas and metadata. For Wan and Flux
   sporch first hands it the adapter in the one key form its converter reads for the family,
   whatever form the file has, with per-module alphas folded in, and keeps LightX2V's whole-tensor
   differences apart (``lora_formats.py``; they are added as ``P += scale x delta``);
2. its ``load_lora_into_transformer`` injects PEFT LoRA layers into the model
   (``ModelMixin.load_lora_adapter``); every module the adapter names must get one, else
   :class:`LoraError` names the ones the model lacks (diffusers only warns);
3. ``set_adapters`` gives each adapter its ``scale``; ``fuse_lora`` merges them into the base
   weights (W += scale x alpha/r x B A) and ``unload_lora`` removes the PEFT layers, so the
   model is plain diffusers modules again: the split/gather hooks, compile and the attention
   routing see the same module tree as without LoRA, at no extra cost per step.

With sharded parameters (``parallel.shard_weights``: FSDP2 rows on dim 0) :func:`merge_lora_rows`
merges the same adapters without PEFT layers (which need whole weights): the tensors come from the
same ``lora_state_dict`` (its conversion), each module's rank and alpha from the ``LoraConfig``
diffusers' ``load_lora_adapter`` would build (``_create_lora_config``, PEFT's ``get_pattern_key``
for ``rank_pattern`` / ``alpha_pattern``), so each module gets what ``set_adapters`` + ``fuse_lora``
adds, ``W += scale x alpha / r x B A`` (``alpha / sqrt(r)`` with rsLoRA; a ``lora_B`` bias:
``b += scale x alpha / r x bias``), each rank computing only its rows of ``B`` times ``A``
(:func:`add_low_rank_rows`: each rank its rows); whole-tensor
differences each rank its rows too. Linear modules only; DoRA and LoKr adapters are refused there
in one line.
"""

from __future__ import annotations

from typing import Any, Mapping, Sequence

import torch

from sporch.orchestrator.models.families import require_family

from sporch.runtime.models.finite import nonfinite_weight
from sporch.runtime.models.shards import local_rows
from sporch.runtime.models.checkpoint import finite
from sporch.runtime.models.lora_formats import Adapter, LoraError, _alphas_apart, read_adapter
from sporch.runtime.models.split_plans import diffusers_type

__all__ = ["LoraError", "apply_lora", "adapted_modules", "merge_lora_rows"]


def add_low_rank_rows(param: torch.Tensor, up: torch.Tensor, down: torch.Tensor, factor: float, offset: int = 0) -> None:
    """``param[offset : offset + len(up)] += factor x up @ down`` (a 2-D weight), computing only the
    rows this rank holds (all of them when ``param`` is not sharded): its rows of ``up``, times
    ``down``, in float32, added in the weight's dtype."""
    local, rows = local_rows(param)
    start, stop = (0, param.shape[0]) if rows is None else (rows.start, rows.stop)
    lo, hi = max(offset, start), min(offset + up.shape[0], stop)
    if lo < hi:
        rows_of = local[lo - start: hi - start]
        rows_of.copy_((rows_of.float() + factor * (up[lo - offset: hi - offset] @ down)).to(local.dtype))


def adapted_modules(state_dict: Mapping[str, Any], prefix: str) -> set[str]:
    """Module names (without ``prefix.``) that carry a ``lora_A`` in a diffusers-format state dict."""
    out = set()
    for key in state_dict:
        if ".lora_A" not in key:
            continue
        name = key.split(".lora_A", 1)[0]
        out.add(name[len(prefix) + 1:] if name.startswith(prefix + ".") else name)
    return out


def _loader(model: torch.nn.Module, loader_name: str | None) -> tuple[str, type]:
    """(the model's family, its diffusers LoRA loader mixin)."""
    if not loader_name:
        raise LoraError(f"{type(model).__name__}: its family names no diffusers LoRA loader; remove model.lora")
    import diffusers.loaders

    return require_family(diffusers_type(type(model)).__name__).name, getattr(diffusers.loaders, loader_name)


def _adapters(model: torch.nn.Module, adapters: Sequence[Mapping[str, Any]], loader_name: str | None):
    """Each entry read and converted (lora_formats.py), with the modules it adapts (at least one
    module or difference, else one line)."""
    family, loader = _loader(model, loader_name)
    for i, entry in enumerate(adapters):
        adapter = read_adapter(model, family, loader, i, entry)
        wanted = adapted_modules(adapter.state_dict, loader.transformer_name)
        if not wanted and not adapter.deltas:
            raise LoraError(f"{adapter.where}: no LoRA pairs for the transformer after {loader.__name__}'s "
                            "conversion (an adapter for the text encoder only?)")
        yield loader, adapter, wanted, float(entry.get("scale", 1.0))


@torch.no_grad()
def _add_deltas(model: torch.nn.Module, adapter: Adapter, scale: float) -> set[str]:
    """``P += scale x delta`` for each whole-tensor difference (a sharded parameter: its rows)."""
    params = dict(model.named_parameters())
    lacking = sorted(set(adapter.deltas) - set(params))
    if lacking:
        raise LoraError(f"{adapter.where}: {len(lacking)} difference tensor(s) change no parameter of "
                        f"{type(model).__name__} (first: {', '.join(lacking[:3])}); an adapter for another model?")
    for name, delta in adapter.deltas.items():
        param = params[name]
        if delta.numel() != param.numel():
            raise LoraError(f"{adapter.where}: the difference for {name} is {list(delta.shape)}, but the parameter is "
                            f"{list(param.shape)}; an adapter for another model size?")
        local, rows = local_rows(param)
        part = delta.reshape(param.shape).to(local.device, torch.float32)
        part = part if rows is None else part[rows]
        local.copy_((local.float() + scale * part).to(local.dtype))
        bad = not finite(local) and nonfinite_weight(local)
        if bad:
            raise LoraError(f"{adapter.where}: merged with scale {scale:g}, {name}: {bad} (the adapter's difference "
                            "overflows); lower model.lora[].scale or use a wider workload.dtype")
    return set(adapter.deltas)


def apply_lora(model: torch.nn.Module, adapters: Sequence[Mapping[str, Any]] | None, loader_name: str | None) -> int:
    """Merge ``adapters`` into ``model`` in place (see the module docstring); returns how many
    modules (and parameters changed by whole-tensor differences) changed. ``loader_name``: the
    family's diffusers LoRA loader mixin."""
    if not adapters:
        return 0
    from peft.tuners.tuners_utils import BaseTunerLayer

    names, scales, changed = [], [], set()
    for i, (loader, adapter, wanted, scale) in enumerate(_adapters(model, adapters, loader_name)):
        changed |= _add_deltas(model, adapter, scale)
        if not wanted:
            continue
        name = f"sporch_lora_{i}"
        kw = {"network_alphas": adapter.alphas} if _alphas_apart(loader) else {}
        try:
            loader.load_lora_into_transformer(adapter.state_dict, transformer=model, adapter_name=name,
                                              metadata=adapter.metadata, **kw)
        except ValueError as exc:  # PEFT: none of the target modules is in the model
            raise LoraError(f"{adapter.where}: {exc}".splitlines()[0]) from None
        got = {n for n, m in model.named_modules() if isinstance(m, BaseTunerLayer) and name in m.lora_A}
        lacking = sorted(wanted - got)
        if lacking:
            raise LoraError(f"{adapter.where}: {len(lacking)} adapted module(s) are not in "
                            f"{type(model).__name__} (first: {', '.join(lacking[:3])}); an adapter for another "
                            "model or size?")
        names.append(name)
        scales.append(scale)
        changed |= got
    if names:
        model.set_adapters(names, weights=scales)
        model.fuse_lora(adapter_names=names)
        model.unload_lora()
    return len(changed)


def _peft_pairs(loader: type, sd: Mapping[str, Any], alphas: Mapping[str, Any] | None, meta: Mapping[str, Any] | None):
    """(the transformer's keys without the prefix, in PEFT form; the ``LoraConfig`` diffusers'
    ``load_lora_adapter`` builds for them): the same steps, without injecting anything."""
    from diffusers.utils.peft_utils import _create_lora_config
    from diffusers.utils.state_dict_utils import convert_unet_state_dict_to_peft

    prefix = loader.transformer_name + "."
    sd = {k[len(prefix):]: v for k, v in sd.items() if k.startswith(prefix)}
    if meta is not None:
        meta = {k[len(prefix):]: v for k, v in meta.items() if k.startswith(prefix)}
    if any(".lokr_" in k for k in sd):
        raise ValueError("a LoKr adapter (Kronecker factors, not LoRA pairs)")
    if sd and "lora_A" not in next(iter(sd)):
        sd = convert_unet_state_dict_to_peft(sd)
    rank = {f"^{k}": v.shape[1] for k, v in sd.items() if "lora_B" in k and v.ndim > 1}
    if alphas:
        alphas = {k[len(prefix):]: v for k, v in alphas.items() if k.startswith(prefix)}
    config = _create_lora_config(sd, alphas, meta, rank, adapter_name="sporch")
    return sd, config


@torch.no_grad()
def merge_lora_rows(model: torch.nn.Module, adapters: Sequence[Mapping[str, Any]] | None, loader_name: str | None) -> int:
    """Merge ``adapters`` into ``model`` whose parameters may be FSDP2 shards (dim-0 rows), each rank
    only its rows (see the module docstring); returns how many modules changed."""
    if not adapters:
        return 0
    import math

    from peft.utils.other import get_pattern_key

    modules = dict(model.named_modules())
    changed = set()
    for loader, adapter, _, scale in _adapters(model, adapters, loader_name):
        where = adapter.where
        changed |= _add_deltas(model, adapter, scale)
        try:
            sd, config = _peft_pairs(loader, adapter.state_dict, adapter.alphas, adapter.metadata)
        except (ValueError, KeyError) as exc:
            raise LoraError(f"{where}: {loader.__name__} cannot read it ({exc})".splitlines()[0]) from None
        wanted = sorted(adapted_modules(sd, loader.transformer_name))
        if not wanted:
            continue
        if config.use_dora:
            raise LoraError(f"{where}: a DoRA adapter; with parallel.shard_weights sporch merges plain LoRA only: "
                            "set parallel.shard_weights=none")
        lacking = [n for n in wanted if n not in modules]
        if lacking:
            raise LoraError(f"{where}: {len(lacking)} adapted module(s) are not in {type(model).__name__} "
                            f"(first: {', '.join(lacking[:3])}); an adapter for another model or size?")
        other = sorted(k for k in sd if not k.startswith(tuple(f"{n}.lora_" for n in wanted)))
        if other:
            raise LoraError(f"{where}: keys beside LoRA pairs ({', '.join(other[:3])}); with parallel.shard_weights "
                            "sporch merges LoRA pairs only: set parallel.shard_weights=none")
        for name in wanted:
            module = modules[name]
            if not isinstance(module, torch.nn.Linear):
                raise LoraError(f"{where}: {name} is a {type(module).__name__}; with parallel.shard_weights sporch "
                                "merges LoRA into Linear modules only: set parallel.shard_weights=none")
            r = config.rank_pattern.get(get_pattern_key(config.rank_pattern.keys(), name), config.r)
            alpha = config.alpha_pattern.get(get_pattern_key(config.alpha_pattern.keys(), name), config.lora_alpha)
            factor = scale * alpha / (math.sqrt(r) if config.use_rslora else r)  # PEFT's set_scale
            weight = module.weight
            down = sd[f"{name}.lora_A.weight"].to(device=local_rows(weight)[0].device, dtype=torch.float32)
            up = sd[f"{name}.lora_B.weight"].to(device=down.device, dtype=torch.float32)
            if down.shape[0] != r or tuple(up.shape) != (weight.shape[0], r) or down.shape[1] != weight.shape[1]:
                raise LoraError(f"{where}: LoRA of {name} is {list(up.shape)} x {list(down.shape)} (rank {r}), but "
                                f"the weight is {list(weight.shape)}; an adapter for another model size?")
            add_low_rank_rows(weight, up, down, factor)
            bias = sd.get(f"{name}.lora_B.bias")
            if bias is not None and module.bias is None:
                raise LoraError(f"{where}: {name} has a LoRA bias but the module has none; an adapter for another "
                                "model?")
            if bias is not None:
                local, rows = local_rows(module.bias)
                part = bias.to(local.device, torch.float32)
                part = part if rows is None else part[rows]
                local.copy_((local.float() + factor * part).to(local.dtype))
            for p in (weight, module.bias):
                bad = p is not None and not finite(local_rows(p)[0]) and nonfinite_weight(local_rows(p)[0])
                if bad:
                    raise LoraError(f"{where}: merged with scale {scale:g}, {name}: {bad} (the adapter's update "
                                    "overflows); lower model.lora[].scale or use a wider workload.dtype")
            changed.add(name)
    return len(changed)
