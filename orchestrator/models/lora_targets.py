"""Where a LoRA file's modules and differences land in sporch's model (stdlib only).

Module names may be the original release's (Flux ``double_blocks.0.img_attn.qkv``, Wan
``blocks.0.self_attn.q``) or diffusers' (``transformer_blocks.0.attn.to_q``,
``blocks.0.attn1.to_q``); :func:`map_targets` matches them against the model family's name table
(keymap.py) and says which of sporch's parameters each one changes, where a fused parameter
holds it (``part`` of ``parts``, the transform's row layout) or refuses the targets the model
lacks in one line; :func:`map_deltas` does the same for the whole-tensor differences, and
:func:`adapter_naming` says which family's names an adapter uses. The runtime merges by these
(sporch.runtime.model.lora); the planner checks them (sporch.orchestrator.plan.adapters).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Optional

from sporch.orchestrator.models.checkpoint_files import CheckpointError
from sporch.orchestrator.models import flux, wan
from sporch.orchestrator.models.keymap import Rule, Table
from sporch.orchestrator.models.lora_file import LoraDelta, LoraFile, LoraModule, _short


#: Name tables by family, as the model's attention kind selects them.
FAMILIES: dict[str, Table] = {"cross": wan.TABLE, "joint": flux.TABLE}


@dataclass(frozen=True)
class Target:
    """Where one adapted module lands in sporch's model."""

    module: LoraModule
    ours: str  # sporch's module (its ``.weight`` is changed)
    part: int  # which of the rule's sources (rows stacked by ``cat``)
    parts: int
    transform: str  # the name table's transform for this format


def _source_pattern(source: str, underscored: bool) -> re.Pattern:
    text = source.replace(".", "_") if underscored else source
    return re.compile(re.escape(text).replace(re.escape("{i}"), r"(?P<i>\d+)") + "$")


def _matchers(table: Table, fmt: str, underscored: bool) -> list[tuple[re.Pattern, Rule, int]]:
    out = []
    for r in table.rules:
        for k, src in enumerate(r.sources.get(fmt, ())):
            if not src.endswith((".weight", ".scale")):  # norm scales: no linear layer to adapt
                out.append((_source_pattern(src, underscored), r, k))
    return out


def _match(name: str, matchers) -> Optional[tuple[Rule, int, str]]:
    for pat, r, k in matchers:
        m = pat.match(name)
        if m:
            return r, k, m.groupdict().get("i") or ""
    return None


def adapter_naming(lora: LoraFile) -> tuple[str, str, int]:
    """(attention kind, name format, modules matched) of the module-name table and format the
    adapter's names match most: ``cross`` (Wan's table) or ``joint`` (Flux's); original or
    diffusers. Read from the adapter file's names; the model's family is plan.model.family."""
    best = ("", "", 0)
    for kind, table in FAMILIES.items():
        for fmt in table.formats:
            matchers = _matchers(table, fmt, lora.underscored)
            hits = sum(_match(m.name, matchers) is not None for m in lora.modules)
            if hits > best[2]:
                best = (kind, fmt, hits)
    return best


def map_targets(lora: LoraFile, attention: str, present: Optional[set[str]] = None,
                where: str = "") -> list[Target]:
    """Every adapted module of ``lora`` as a :class:`Target` in a model of ``attention`` kind.
    ``present``: sporch's module names of the model (the runtime's state dict, or
    :func:`module_names` at plan time); a target outside it, or matching no name of the family,
    is refused, all of them in one line."""
    table = FAMILIES.get(attention)
    where = where or str(lora.path)
    if table is None:
        raise CheckpointError(f"{where}: LoRA adapters are merged into Wan and Flux models only "
                              f"(model.attention cross or joint), not {attention!r}")
    kind, fmt, hits = adapter_naming(lora)
    if kind and kind != attention:
        raise CheckpointError(f"{where} is a LoRA for {FAMILIES[kind].model} ({hits} of {len(lora.modules)} modules "
                              f"match), but the job's model is {table.model}; use an adapter trained for it")
    fmt = fmt or "diffusers"
    matchers = _matchers(table, fmt, lora.underscored)
    out, missing = [], []
    for m in lora.modules:
        found = _match(m.name, matchers)
        ours = found[0].ours.replace("{i}", found[2]) if found else None
        if found is None or (present is not None and ours not in present):
            missing.append(m.name)
            continue
        r, k, _ = found
        out.append(Target(m, ours, k, len(r.sources[fmt]), r.transform_for(fmt)))
    if missing:
        raise CheckpointError(f"{where}: {len(missing)} of the LoRA's {len(lora.modules)} target modules are not in "
                              f"the {table.model} model ({_short(missing)}); use an adapter trained for this "
                              "model (its depth, its image or guidance inputs)")
    return out


@dataclass(frozen=True)
class DeltaTarget:
    """Where one whole-tensor difference lands: sporch's parameter and the name table's transform."""

    delta: LoraDelta
    ours: str  # sporch's parameter (``blocks.0.self_attn.q.bias``, ``blocks.0.modulation``)
    transform: str


def map_deltas(lora: LoraFile, attention: str, present: Optional[set[str]] = None, where: str = "") -> list[DeltaTarget]:
    """Every difference of ``lora`` as a :class:`DeltaTarget` in a model of ``attention`` kind, by
    the family's name table in the original release's names (the format LightX2V publishes):
    a module rule's source plus the leaf, or a parameter rule's source. ``present``: sporch's
    parameter names (the runtime's state dict); anything unmatched, outside it, or landing in a
    fused (``cat``) parameter is refused, all in one line."""
    table = FAMILIES.get(attention)
    where = where or str(lora.path)
    if not lora.deltas:
        return []
    if table is None:
        raise CheckpointError(f"{where}: LoRA adapters are merged into Wan and Flux models only, not {attention!r}")
    rules = []
    for r in table.rules:
        for src in r.sources.get("original", ()):
            pat = re.escape(src).replace(re.escape("{i}"), r"(?P<i>\d+)")
            rules.append((re.compile(pat + r"(?:\.(?P<leaf>\w+))?$"), r, len(r.sources["original"])))
    out, missing = [], []
    for d in lora.deltas:
        hit = None
        for pat, r, n in rules:
            m = pat.match(d.param)
            if m:
                hit = (r, n, m.group("i") or "", m.group("leaf"))
                break
        if hit is None:
            missing.append(d.param)
            continue
        r, n, i, leaf = hit
        ours = r.ours.replace("{i}", i) + (f".{leaf}" if leaf else "")
        transform = r.transform_for("original")
        if (present is not None and ours not in present) or (transform == "cat" and n > 1):
            missing.append(d.param)
            continue
        out.append(DeltaTarget(d, ours, transform))
    if missing:
        raise CheckpointError(f"{where}: {len(missing)} of the adapter's {len(lora.deltas)} difference tensors change "
                              f"no parameter of the {table.model} model ({_short(missing)}); use an adapter trained "
                              "for this model")
    return out
