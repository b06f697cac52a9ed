"""The model a checkpoint's ``config.json`` describes (standard library only: the planner reads
it on a login node or a laptop, the runtime the same way).

``read_checkpoint_model(weights)`` finds the config (``weights`` a folder, its ``transformer/``,
or a file beside one), names its diffusers class and family (``models/families``), checks its
values (``families.config_problem``: the keys the family declares, their types and ranges, and the
class's own rules) and maps it to sporch's ``plan.model`` fields (the family's ``shape``). The
diffusers config of every supported class is kept as it is: the runtime builds the class from it.
An original release's config (Wan's ``WanModel``) is mapped to the diffusers class's config by its
family (``Family.original``; the tensors' shapes say what the config does not: the CLIP image
input), and its tensors are converted by diffusers' single-file converter when loaded. The
original Flux release ships no config.json: name its preset.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Mapping, Optional

from sporch.orchestrator.models.checkpoint_files import CheckpointError, kind, open_checkpoint, read_file
from sporch.orchestrator.models.checkpoint_format import original_format, strip_prefix
from sporch.orchestrator.models.families import (config_class, config_problem, family_of_class, get_family,
                                                 original_config_family, supported_classes)


class UnknownModelConfig(CheckpointError):
    """A config.json that describes no model sporch knows: one naming no class (with a preset named,
    the preset says what the model is and the loader checks the tensors), or another diffusers
    class (``class_name``: refused whatever the preset)."""

    def __init__(self, message: str, class_name: str | None = None) -> None:
        super().__init__(message)
        self.class_name = class_name


@dataclass(frozen=True)
class CheckpointModel:
    family: str  # the family's title: "Wan2.1 / Wan2.2", "Flux.1", "Qwen-Image", ...
    fmt: str  # "diffusers" | "original"
    config_file: Path
    #: ``plan.model`` shape fields (attention, depth, hidden, num_heads, head_dim, ...)
    fields: Mapping[str, Any]
    #: which config key set each field (for messages)
    keys: Mapping[str, str] = field(default_factory=dict)
    #: models/families name ("wan", "flux", "qwen-image", ...)
    family_key: Optional[str] = None
    #: the diffusers class the model runs as
    diffusers_class: Optional[str] = None
    #: the class's config (the config.json itself, or an original release's mapped to it)
    config: Optional[Mapping[str, Any]] = None

    def describe(self) -> str:
        return f"{self.family} ({self.fmt} config {self.config_file})"


def find_config(weights: str | Path) -> Optional[Path]:
    """The config.json that describes ``weights`` (a folder, its transformer/, or beside a
    file), or None."""
    p = Path(weights).expanduser()
    folder = p if kind(p) == "dir" else p.parent
    for candidate in (folder / "transformer" / "config.json", folder / "config.json"):
        if kind(candidate) is not None:  # a FIFO or a folder there is refused when read, not skipped
            return candidate
    return None


def read_checkpoint_model(weights: str | Path) -> Optional[CheckpointModel]:
    """The model ``weights``' config.json describes; None without a config.json. A config sporch
    cannot run is a CheckpointError naming the file and the key."""
    path = find_config(weights)
    if path is None:
        return None
    return with_vae_stride(model_from_config(read_json_object(path), path))


def with_vae_stride(model: CheckpointModel) -> CheckpointModel:
    """A transformer in a diffusers pipeline folder takes its latent strides from the folder's
    ``vae/config.json`` where its family reads them (``Family.vae_stride_from``: Wan's)."""
    fam = get_family(model.family_key) if model.family_key else None
    vae = model.config_file.parent.parent / "vae" / "config.json"
    if (fam is None or fam.vae_stride_from is None or model.config_file.parent.name != "transformer"
            or kind(vae) is None):
        return model
    try:
        stride = fam.vae_stride_from(read_json_object(vae))
    except ValueError as exc:
        raise CheckpointError(f"{vae}: {exc}") from None
    if stride is None:
        return model
    return replace(model, fields={**model.fields, "vae_stride": list(stride)},
                   keys={**model.keys, "vae_stride": "vae/config.json scale_factor_*"})


def read_json_object(path: Path) -> dict:
    """The JSON object in ``path``, or a one-line CheckpointError."""
    raw = read_file(path)  # a regular file only (a FIFO would block); an unreadable one is one line
    try:
        config = json.loads(raw.decode("utf-8"))
    except RecursionError:
        raise CheckpointError(f"cannot read {path}: it nests too deeply") from None
    except ValueError as exc:
        raise CheckpointError(f"cannot read {path}: {exc}") from None
    if not isinstance(config, dict):
        raise CheckpointError(f"{path} is not a JSON object")
    return config


#: Text tokens and latent strides a family's config does not hold come from ``Family.shape`` (its
#: pipeline's); these fields are never read from a config key.
PIPELINE_FIELDS = ("text_len", "vae_stride", "attention")


def _original_shapes(folder: Path) -> dict[str, tuple]:
    """The tensor shapes (names without a repackaging prefix) of the original-release checkpoint in
    ``folder``, {} where its files cannot be read (the planner's checkpoint check names why)."""
    try:
        ckpt = open_checkpoint(folder)
    except CheckpointError:
        return {}
    found = original_format(ckpt.tensors)
    return strip_prefix({n: t.shape for n, t in ckpt.tensors.items()}, found[2] if found else "")


def model_from_config(config: Mapping[str, Any], path: Path) -> CheckpointModel:
    """The model of the config.json ``config`` (read from ``path``): a supported diffusers class,
    or an original release's config its family maps; else :class:`UnknownModelConfig`."""
    cls = config_class(config)
    fam, fmt = family_of_class(cls), "diffusers"
    if fam is None:
        fam, fmt = original_config_family(config), "original"
        if fam is None:
            raise UnknownModelConfig(
                f"{path}: diffusers class {cls or '(none)'!r} is not supported: it is not a model sporch runs (no "
                f"family holds a split plan for it: no _cp_plan sporch reads, no shipped table); supported: "
                f"{', '.join(supported_classes())} (and the original Wan release's WanModel config)", cls or None)
        try:
            config = fam.original.diffusers_config(config, _original_shapes(path.parent))
        except CheckpointError as exc:
            raise CheckpointError(f"{path}: {exc}") from None
        cls = fam.original.class_name
    problem = config_problem(fam, config)
    if problem is not None:
        key, why = problem
        raise CheckpointError(f"{path}: {key}: {why}")
    try:
        fields = fam.shape(config)
    except ValueError as exc:  # the class's own rules (families/rope_rules.py), one line naming the key
        raise CheckpointError(f"{path}: {' '.join(str(exc).split())} ({cls})") from None
    return CheckpointModel(family=fam.title, fmt=fmt, config_file=path, fields=fields,
                           keys={k: "config.json" for k in fields if k not in PIPELINE_FIELDS}, family_key=fam.name,
                           diffusers_class=cls, config=dict(config))
