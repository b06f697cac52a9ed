"""Build a supported diffusers transformer from a folder (or a config), no preset needed.

``transformer_folder(path)``: a pipeline folder's ``transformer/`` or the folder itself (the one
holding config.json). ``load_diffusers(path, dtype=, device=)``: the class named by config.json's
``_class_name`` (a class some family covers: ``models/families``), built with its parameters on
the meta device (accelerate's ``init_empty_weights``; buffers the config derives stay real),
then its parameters assigned from the folder's safetensors (memory-mapped, strict: a missing or
unexpected tensor is an error). ``random_diffusers(class_name, config, seed=)``: the same class
with seeded random weights (tests, tiny folders).
"""

from __future__ import annotations

import json
from pathlib import Path

import torch

from sporch.orchestrator.models.families import config_class, require_family
from sporch.orchestrator.models.checkpoint_files import CheckpointError

__all__ = ["transformer_folder", "read_config", "diffusers_class", "load_diffusers", "random_diffusers", "random_class"]


def transformer_folder(path: str | Path) -> Path:
    p = Path(path).expanduser()
    if p.is_file():
        p = p.parent
    if (p / "transformer" / "config.json").is_file():
        return p / "transformer"
    if (p / "config.json").is_file():
        return p
    raise CheckpointError(f"{path}: no config.json here or in transformer/ (a diffusers folder is needed)")


def read_config(path: str | Path) -> dict:
    return json.loads((transformer_folder(path) / "config.json").read_text(encoding="utf-8"))


def diffusers_class(class_name: str) -> type:
    """The diffusers class ``class_name`` of a supported family (else UnsupportedClass)."""
    require_family(class_name)
    import diffusers

    return getattr(diffusers, class_name)


def prepare_model(model: torch.nn.Module) -> torch.nn.Module:
    model.eval().requires_grad_(False)
    model.set_attention_backend("native")  # the processors dispatch to torch's SDPA, which sporch routes
    return model


def load_diffusers(path: str | Path, *, dtype: torch.dtype = torch.float32, device="cpu") -> torch.nn.Module:
    from safetensors import safe_open

    folder = transformer_folder(path)
    config = read_config(folder)
    cls = diffusers_class(config_class(config))
    from accelerate import init_empty_weights

    with init_empty_weights(include_buffers=False):  # parameters on meta; derived buffers (RoPE tables) real
        model = cls.from_config(config)
    expected = dict(model.state_dict())
    state = {}
    for f in sorted(folder.glob("*.safetensors")):
        with safe_open(str(f), framework="pt", device=str(device)) as sf:
            for key in sf.keys():
                state[key] = sf.get_tensor(key).to(dtype)
    missing = sorted(set(expected) - set(state))
    extra = sorted(set(state) - set(expected))
    if missing or extra:
        raise CheckpointError(f"{folder}: {len(missing)} tensor(s) missing (first: {missing[:3]}), "
                              f"{len(extra)} unexpected (first: {extra[:3]}) for {cls.__name__}")
    for key, t in state.items():
        if tuple(t.shape) != tuple(expected[key].shape):
            raise CheckpointError(f"{folder}: {key} has shape {tuple(t.shape)}, {cls.__name__} needs "
                                  f"{tuple(expected[key].shape)}")
    model.load_state_dict(state, assign=True, strict=True)
    return prepare_model(model.to(device))


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
    return prepare_model(model.to(dtype))
