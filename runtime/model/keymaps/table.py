"""Name tables: how a published checkpoint's tensors become sporch's parameters.

A :class:`Table` is a list of :class:`Rule` rows, one per sporch module or parameter, each
naming its source tensor(s) in every published format and the transform applied on load.
Patterns use ``{i}`` for a block index; a rule on a module covers all its parameters (the
leaf name, ``weight``/``bias``, is appended on both sides). The formats' own config.json keys
are mapped to ModelConfig fields so a checkpoint of another size is refused by name.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any, Callable, Mapping, Sequence

import torch

from ..config import ModelConfig
from sporch.orchestrator.contract.checkpoint_files import CheckpointError

Transform = Callable[[Sequence[torch.Tensor], ModelConfig, str], torch.Tensor]


def copy(ts: Sequence[torch.Tensor], cfg: ModelConfig, leaf: str) -> torch.Tensor:
    return ts[0]


def cat(ts: Sequence[torch.Tensor], cfg: ModelConfig, leaf: str) -> torch.Tensor:
    """Projections stored separately (q, k, v[, mlp]) -> one fused projection (rows stacked)."""
    return torch.cat(list(ts), dim=0)


def conv_as_linear(ts: Sequence[torch.Tensor], cfg: ModelConfig, leaf: str) -> torch.Tensor:
    """Conv3d/Conv2d patch embedding [D, C, pt, ph, pw] -> Linear over (C, pt, ph, pw) features."""
    t = ts[0]
    return t.reshape(t.shape[0], -1) if leaf == "weight" else t


def rows_channel_last_to_first(ts: Sequence[torch.Tensor], cfg: ModelConfig, leaf: str) -> torch.Tensor:
    """Output head rows ordered (pt, ph, pw, C) (Wan, both formats) -> sporch's (C, pt, ph, pw)."""
    t = ts[0]
    pt, ph, pw = cfg.patch
    if t.shape[0] != cfg.patch_out:
        return t  # the shape check reports it
    rest = tuple(t.shape[1:])
    return t.reshape(pt, ph, pw, cfg.out_dim, *rest).movedim(3, 0).reshape(cfg.patch_out, *rest)


def swap_halves(ts: Sequence[torch.Tensor], cfg: ModelConfig, leaf: str) -> torch.Tensor:
    """(scale, shift) -> (shift, scale) rows (diffusers' AdaLayerNormContinuous)."""
    a, b = ts[0].chunk(2, dim=0)
    return torch.cat([b, a], dim=0)


@dataclass(frozen=True)
class Rule:
    ours: str  # sporch module or parameter, with {i}
    sources: Mapping[str, tuple[str, ...]]  # format -> source name(s), same placeholders
    transform: Transform | Mapping[str, Transform] = copy  # one for all formats, or per format

    def transform_for(self, fmt: str) -> Transform:
        return self.transform.get(fmt, copy) if isinstance(self.transform, Mapping) else self.transform


def rule(ours: str, transform: Transform | Mapping[str, Transform] = copy, **sources: str | tuple[str, ...]) -> Rule:
    return Rule(ours, {k: (v,) if isinstance(v, str) else tuple(v) for k, v in sources.items()}, transform)


@dataclass
class Table:
    model: str  # "Wan2.1", "Flux.1"
    rules: list[Rule]
    #: format -> {config.json key: ModelConfig attribute} (checked when config.json is present)
    config_keys: Mapping[str, Mapping[str, str]] = field(default_factory=dict)
    _compiled: list[tuple[re.Pattern, Rule]] = field(default_factory=list, init=False, repr=False)

    def __post_init__(self) -> None:
        for r in self.rules:
            pat = re.escape(r.ours).replace(re.escape("{i}"), r"(?P<i>\d+)")
            self._compiled.append((re.compile(pat + r"(?:\.(?P<leaf>\w+))?$"), r))

    @property
    def formats(self) -> list[str]:
        return sorted({f for r in self.rules for f in r.sources})

    def rule_for(self, name: str) -> tuple[Rule, dict[str, str]]:
        for pat, r in self._compiled:
            m = pat.match(name)
            if m:
                return r, {k: v for k, v in m.groupdict().items() if v is not None}
        raise KeyError(name)

    def sources(self, own_names: Sequence[str], fmt: str) -> dict[str, tuple[list[str], Transform, str]]:
        """sporch parameter -> (source tensor names in ``fmt``, transform, leaf)."""
        out = {}
        for name in own_names:
            if fmt == "sporch":
                out[name] = ([name], copy, name.rsplit(".", 1)[-1])
                continue
            r, groups = self.rule_for(name)
            leaf = groups.get("leaf")
            srcs = []
            for s in r.sources[fmt]:
                s = s.replace("{i}", groups.get("i", ""))
                srcs.append(f"{s}.{leaf}" if leaf else s)
            out[name] = (srcs, r.transform_for(fmt), leaf or name.rsplit(".", 1)[-1])
        return out

    def check_config(self, fmt: str, config: Mapping[str, Any], cfg: ModelConfig, where: str) -> None:
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
