"""Build a supported diffusers transformer from a checkpoint (or a config), no preset needed.

``transformer_folder(path)``: a pipeline folder's ``transformer/`` or the folder itself (the one
holding config.json). ``read_config(path)``: the diffusers config of the checkpoint at ``path`` in
any format sporch reads (a diffusers folder's config.json, or an original release's config mapped
by its family: ``models/checkpoint_format``). ``load_diffusers(path, dtype=, device=)``: that
class built with its parameters on the meta device (accelerate's ``init_empty_weights``; buffers
the config derives stay real), allocated, and filled from the checkpoint's memory-mapped files
(``checkpoint.py``: strict, an original release's names mapped by diffusers' converter, NaN and inf
refused). ``random_diffusers(class_name, config, seed=)``: the same class with seeded random
weights (tests, tiny folders).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Mapping, Optional

import torch

from sporch.orchestrator.models.families import require_family
from sporch.orchestrator.models.checkpoint_files import CheckpointError

from sporch.runtime.models.checkpoint import fill_parameters, open_weights

__all__ = ["transformer_folder", "read_config", "diffusers_class", "meta_model", "cast_parameters", "allocate",
           "load_diffusers", "random_diffusers", "from_state",
           "random_class"]


def transformer_folder(path: str | Path) -> Path:
    p = Path(path).expanduser()
    if p.is_file():
        p = p.parent
    if (p / "transformer" / "config.json").is_file():
        return p / "transformer"
    if (p / "config.json").is_file():
        return p
    raise CheckpointError(f"{path}: no config.json here or in transformer/ (a diffusers folder is needed)")


def read_config(path: str | Path, known: Optional[Mapping[str, Any]] = None) -> dict:
    """The diffusers config of the checkpoint at ``path`` (see the module docstring); ``known``: the
    config already decided (the plan's), for a checkpoint that ships none (a Flux file)."""
    return dict(open_weights(path, known)[1].config)


def diffusers_class(class_name: str) -> type:
    """The diffusers class ``class_name`` of a supported family (else UnsupportedClass)."""
    require_family(class_name)
    import diffusers

    return getattr(diffusers, class_name)


def prepare_model(model: torch.nn.Module) -> torch.nn.Module:
    model.eval().requires_grad_(False)
    model.set_attention_backend("native")  # the processors dispatch to torch's SDPA, which sporch routes
    return model


def kept_in_float32(model: torch.nn.Module, name: str, dtype: torch.dtype) -> bool:
    """Whether parameter ``name`` stays float32 in a ``dtype`` model: the class's
    ``_keep_in_fp32_modules`` (Wan's time embedder, modulation tables and norms), matched as
    diffusers' loader matches them (a module name among the dotted parts) in half precision."""
    keep = getattr(type(model), "_keep_in_fp32_modules", None) or ()
    return dtype in (torch.float16, torch.bfloat16) and any(k in name.split(".") for k in keep)


def cast_parameters(model: torch.nn.Module, dtype: torch.dtype) -> torch.nn.Module:
    """Every floating parameter of ``model`` in ``dtype``, those the class keeps in float32 in float32
    (:func:`kept_in_float32`: what ``from_pretrained(torch_dtype=)`` loads)."""
    for module_name, module in model.named_modules():
        for name, p in list(module._parameters.items()):
            if p is None or not p.is_floating_point():
                continue
            want = torch.float32 if kept_in_float32(model, f"{module_name}.{name}".lstrip("."), dtype) else dtype
            if p.dtype != want:
                module._parameters[name] = torch.nn.Parameter(p.to(want), requires_grad=False)
    return model


def meta_model(cls: type, config: Mapping[str, Any], dtype: torch.dtype) -> torch.nn.Module:
    """``cls`` from ``config`` with its parameters on the meta device in ``dtype`` (:func:`cast_parameters`);
    buffers real."""
    from accelerate import init_empty_weights

    with init_empty_weights(include_buffers=False):  # parameters on meta; derived buffers (RoPE tables) real
        model = cls.from_config(dict(config))
    return cast_parameters(model, dtype)


def allocate(model: torch.nn.Module, device: torch.device) -> torch.nn.Module:
    """``model``'s parameters (this rank's shards, for a sharded one) allocated on ``device``,
    uninitialised; the buffers the config derived kept."""
    saved = {name: b for name, b in model.named_buffers() if b.device.type != "meta"}
    model = model.to_empty(device=device)
    for name, value in saved.items():
        owner, _, leaf = name.rpartition(".")
        model.get_submodule(owner)._buffers[leaf] = value.to(device)
    return model


def load_diffusers(path: str | Path, *, dtype: torch.dtype = torch.float32, device="cpu",
                   config: Optional[Mapping[str, Any]] = None) -> torch.nn.Module:
    """The diffusers transformer of the checkpoint at ``path``, whole (see the module docstring)."""
    ckpt, fmt = open_weights(path, config)
    model = allocate(meta_model(diffusers_class(fmt.class_name), fmt.config, dtype), torch.device(device))
    fill_parameters(model, ckpt, fmt)
    return prepare_model(model)


def from_state(class_name: str, config: dict, state: dict, dtype: torch.dtype) -> torch.nn.Module:
    """The class of ``class_name`` from ``config`` with ``state``'s tensors as its parameters and
    buffers (no copy: a pack's cached weights, runtime/models/weight_cache.py)."""
    from accelerate import init_empty_weights

    with init_empty_weights(include_buffers=False):  # parameters on meta; derived buffers (RoPE tables) real
        model = diffusers_class(class_name).from_config(config)
    model.load_state_dict(state, assign=True, strict=True)
    return prepare_model(model)


def random_diffusers(class_name: str, config: dict, *, seed: int = 0, dtype: torch.dtype = torch.float32) -> torch.nn.Module:
    """The class of a supported family (else UnsupportedClass) with seeded random weights."""
    diffusers_class(class_name)
    return random_class(class_name, config, seed=seed, dtype=dtype)


def random_class(class_name: str, config: dict, *, seed: int = 0, dtype: torch.dtype = torch.float32) -> torch.nn.Module:
    """diffusers' ``class_name`` (any class, supported or not: the split-plan derivation tries
    classes no family covers yet) from ``config`` with seeded random weights, every parameter
    drawn (zero-initialised layers too)."""
    import diffusers

    cls = getattr(diffusers, class_name)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        model = cls.from_config(config)
        for name, p in model.named_parameters():  # every parameter random, zero-initialised layers too
            if p.dim() >= 2:
                p.data.normal_(0, 1.0 / max(1, p.shape[-1]) ** 0.5)
            elif name.endswith("weight"):  # norm scales around 1
                p.data.normal_(1.0, 0.2)
            else:
                p.data.normal_(0, 0.2)
    return prepare_model(cast_parameters(model, dtype))
