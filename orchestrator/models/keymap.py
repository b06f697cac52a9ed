"""Name tables: how a published checkpoint's tensors become sporch's parameters (pure data).

A :class:`Table` is a list of :class:`Rule` rows, one per sporch module or parameter, each
naming its source tensor(s) in every published format and the transform applied on load.
Patterns use ``{i}`` for a block index; a rule on a module covers all its parameters (the
leaf name, ``weight``/``bias``, is appended on both sides). The formats' own config.json keys
are mapped to ModelConfig fields so a checkpoint of another size is refused by name.

Transforms are named here and implemented on tensors by the runtime
(sporch.runtime.model.keymaps.transforms):

* ``copy``                       the one source tensor as it is
* ``cat``                        projections stored separately (q, k, v[, mlp]) -> one fused
  projection (rows stacked)
* ``conv_as_linear``             a Conv3d/Conv2d patch embedding -> Linear over (C, pt, ph, pw)
* ``rows_channel_last_to_first`` output head rows (pt, ph, pw, C) -> sporch's (C, pt, ph, pw)
* ``swap_halves``                (scale, shift) rows -> (shift, scale) (diffusers'
  AdaLayerNormContinuous)
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any, Mapping, Sequence

from sporch.orchestrator.models.checkpoint_files import CheckpointError

TRANSFORMS = ("copy", "cat", "conv_as_linear", "rows_channel_last_to_first", "swap_halves")


@dataclass(frozen=True)
class Rule:
    ours: str  # sporch module or parameter, with {i}
    sources: Mapping[str, tuple[str, ...]]  # format -> source name(s), same placeholders
    transform: str | Mapping[str, str] = "copy"  # one for all formats, or per format (default copy)

    def transform_for(self, fmt: str) -> str:
        return self.transform.get(fmt, "copy") if isinstance(self.transform, Mapping) else self.transform


def rule(ours: str, transform: str | Mapping[str, str] = "copy", **sources: str | tuple[str, ...]) -> Rule:
    for name in [transform] if isinstance(transform, str) else transform.values():
        if name not in TRANSFORMS:
            raise ValueError(f"unknown transform {name!r} for {ours}; known: {', '.join(TRANSFORMS)}")
    return Rule(ours, {k: (v,) if isinstance(v, str) else tuple(v) for k, v in sources.items()}, transform)


@dataclass
class Table:
    model: str  # "Wan2.1", "Flux.1"
    rules: list[Rule]
    #: format -> {config.json key: ModelConfig attribute} (checked when config.json is present)
    config_keys: Mapping[str, Mapping[str, str]] = field(default_factory=dict)
    #: the rules' patterns, compiled on the first lookup (not at import: the CLI loads these
    #: tables for every job file, and most commands never look a name up)
    _compiled: list[tuple[re.Pattern, Rule]] = field(default_factory=list, init=False, repr=False)

    def _patterns(self) -> list[tuple[re.Pattern, Rule]]:
        if not self._compiled:
            self._compiled = [(re.compile(re.escape(r.ours).replace(re.escape("{i}"), r"(?P<i>\d+)")
                                          + r"(?:\.(?P<leaf>\w+))?$"), r) for r in self.rules]
        return self._compiled

    @property
    def formats(self) -> list[str]:
        return sorted({f for r in self.rules for f in r.sources})

    def rule_for(self, name: str) -> tuple[Rule, dict[str, str]]:
        for pat, r in self._patterns():
            m = pat.match(name)
            if m:
                return r, {k: v for k, v in m.groupdict().items() if v is not None}
        raise KeyError(name)

    def sources(self, own_names: Sequence[str], fmt: str) -> dict[str, tuple[list[str], str, str]]:
        """sporch parameter -> (source tensor names in ``fmt``, transform name, leaf)."""
        out = {}
        for name in own_names:
            if fmt == "sporch":
                out[name] = ([name], "copy", name.rsplit(".", 1)[-1])
                continue
            r, groups = self.rule_for(name)
            leaf = groups.get("leaf")
            srcs = []
            for s in r.sources[fmt]:
                s = s.replace("{i}", groups.get("i", ""))
                srcs.append(f"{s}.{leaf}" if leaf else s)
            out[name] = (srcs, r.transform_for(fmt), leaf or name.rsplit(".", 1)[-1])
        return out

    def check_config(self, fmt: str, config: Mapping[str, Any], cfg: Any, where: str) -> None:
        """Refuse a checkpoint whose config.json disagrees with the model config ``cfg`` (any
        object with the ModelConfig attributes the table names)."""
        for key, attr in self.config_keys.get(fmt, {}).items():
            if config.get(key) is None:
                continue
            theirs, ours = config[key], getattr(cfg, attr)
            if isinstance(theirs, list):
                theirs = tuple(theirs)
            if isinstance(ours, bool) or isinstance(theirs, bool):
                theirs, ours = bool(theirs), bool(ours)
            if theirs != ours:
                raise CheckpointError(
                    f"{where}: the checkpoint's {key}={config[key]!r} does not match the job's model "
                    f"({attr}={ours!r}); use the preset of this checkpoint or set model.{attr}")
