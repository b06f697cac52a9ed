"""Which format a checkpoint's tensors are in and the diffusers class and config it loads into
(standard library only: headers and config.json, nothing loaded).

``checkpoint_format(ckpt)`` (``ckpt`` from :func:`~.checkpoint_files.open_checkpoint`):

* the original release of a family that has one (``Family.original``: Wan-Video's
  ``WanModel``, Black Forest Labs' Flux), told by its marker tensors: the diffusers config is the
  family's mapping of the release's config.json and the tensors' shapes
  (``diffusers_config_from_original``); the runtime converts the names with diffusers' converter;
* else a diffusers checkpoint: its config.json names the class (``_class_name``) of a supported
  family, and its tensors carry the class's own names.

``known``: a diffusers config already decided (the plan's ``model.diffusers_config``, a preset's),
used where the checkpoint has no config.json of its own (a Flux file, a repackaged Wan file);
without it a Flux file's config is read from its shapes (Flux.1's RoPE axes for 128-wide heads).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Mapping, Optional

from sporch.orchestrator.models.checkpoint_files import CheckpointError, CheckpointFiles
from sporch.orchestrator.models.families import FAMILIES, config_class, require_family
from sporch.orchestrator.models.families.original_format import OriginalFormat

#: Every original-release format sporch loads, by family (``Family.original``).
ORIGINAL_FORMATS: dict[str, OriginalFormat] = {f.name: f.original for f in FAMILIES if f.original is not None}


@dataclass(frozen=True)
class CheckpointFormat:
    family: str  # models/families name
    fmt: str  # "diffusers" | "original"
    class_name: str  # the diffusers class the checkpoint loads into
    config: Mapping[str, Any]  # its diffusers config (mapped, for an original format)
    prefix: str = ""  # the prefix every tensor name carries (original formats: "" or ComfyUI's)
    original: Optional[OriginalFormat] = field(default=None, repr=False)

    def describe(self) -> str:
        if self.original is None:
            return f"diffusers {self.class_name}"
        return f"{self.original.release}, loaded into {self.class_name}"


def original_format(names) -> tuple[str, OriginalFormat, str] | None:
    """(family, format, prefix) of the original release whose marker tensors ``names`` hold, or None."""
    names = set(names)
    for family, fmt in ORIGINAL_FORMATS.items():
        prefix = fmt.prefix_of(names)
        if prefix is not None:
            return family, fmt, prefix
    return None


def strip_prefix(shapes: Mapping[str, tuple], prefix: str) -> dict[str, tuple]:
    return {k[len(prefix):] if prefix and k.startswith(prefix) else k: tuple(v) for k, v in shapes.items()}


def checkpoint_format(ckpt: CheckpointFiles, known: Optional[Mapping[str, Any]] = None) -> CheckpointFormat:
    """The format of ``ckpt`` and the diffusers config it loads into (see the module docstring);
    a one-line CheckpointError naming the checkpoint otherwise."""
    where = ckpt.describe()
    shapes = {name: info.shape for name, info in ckpt.tensors.items()}
    found = original_format(shapes)
    if found is not None:
        family, fmt, prefix = found
        if not ckpt.config and known:  # no config.json beside it (a Flux file): the plan's or preset's
            return CheckpointFormat(family, "original", fmt.class_name, dict(known), prefix, fmt)
        try:
            config = fmt.diffusers_config(ckpt.config, strip_prefix(shapes, prefix))
        except CheckpointError as exc:
            raise CheckpointError(f"{where}: {exc}") from None
        return CheckpointFormat(family, "original", fmt.class_name, config, prefix, fmt)
    config = ckpt.config or dict(known or {})
    cls = config_class(config)
    if not cls:
        raise CheckpointError(f"{where}: no config.json names its diffusers class, and its tensors are not in an "
                              f"original release's names ({', '.join(f.release for f in ORIGINAL_FORMATS.values())}); "
                              "a diffusers checkpoint needs its config.json")
    fam = require_family(cls, where)
    return CheckpointFormat(fam.name, "diffusers", cls, config)
