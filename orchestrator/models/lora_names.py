"""A LoRA file's modules in diffusers' names, and the form diffusers' LoRA loader reads it in
(standard library only: the planner checks an adapter with it, the runtime hands the adapter to
diffusers by it, so the two never disagree).

For a family whose original release sporch knows (``families/<family>.ORIGINAL.lora_names``: Wan,
Flux), an adapter may name the class's linear modules as diffusers does
(``blocks.0.attn1.to_q``) or as the release does (``blocks.0.self_attn.q``, Flux's fused
``double_blocks.0.img_attn.qkv``), dotted or with kohya's underscores, under any prefix
``lora_keys`` strips. :func:`lora_plan` matches every module, refuses in one line what the model
lacks (another depth, an image or guidance input it does not have, a module that is no linear of
the class) and says:

* ``targets``: each adapter module's diffusers module(s);
* ``renames``: each down/up key as diffusers' loader for the family reads it: diffusers' names as
  ``transformer.<module>.lora_A.weight`` / ``.lora_B.weight``; the release's names in the form
  its converter takes (``LoraStyle``: Wan ``diffusion_model.<module>.lora_down.weight``, Flux
  sd-scripts' ``lora_unet_<module_underscored>.lora_down.weight``), whatever form the file has;
* ``folds``: each per-module ``.alpha`` tensor, which the runtime folds into its down matrix
  (x alpha / rank) before diffusers sees the file: diffusers' converters read these for some
  modules only (Wan's embedders and head, Flux's final layer drop theirs). An alpha in the header
  metadata (``lora_adapter_metadata``) is left to diffusers;
* ``deltas``: whole-tensor differences (LightX2V's ``.diff`` / ``.diff_b`` / ``.diff_m``) with the
  release's parameter they change (the runtime renames it with the family's checkpoint converter);
  only families that list ``delta_parameters`` (Wan) take them.

A family without such a table (the other families) gets its adapter handed to diffusers'
loader as the file is; :func:`lora_naming` still tells which family's names an adapter uses.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Any, Mapping, Optional

from sporch.orchestrator.models.checkpoint_files import CheckpointError
from sporch.orchestrator.models.checkpoint_format import ORIGINAL_FORMATS
from sporch.orchestrator.models.families import get_family
from sporch.orchestrator.models.families.original_format import LoraName, OriginalFormat
from sporch.orchestrator.models.lora_file import LoraFile, _short
from sporch.orchestrator.models.lora_keys import _split

NAMINGS = ("original", "diffusers")


@dataclass
class LoraPlan:
    """How one adapter file reaches diffusers' loader (module docstring)."""

    family: str
    naming: str  # "original" | "diffusers" | "" (a family without a table: the file as it is)
    targets: dict[str, tuple[str, ...]] = field(default_factory=dict)  # adapter module -> diffusers module(s)
    renames: dict[str, str] = field(default_factory=dict)  # file key -> key handed to diffusers
    folds: dict[str, str] = field(default_factory=dict)  # down key -> its .alpha key
    deltas: dict[str, str] = field(default_factory=dict)  # difference key -> the release's parameter


def _pattern(name: str, underscored: bool) -> re.Pattern:
    text = name.replace(".", "_") if underscored else name
    return re.compile(re.escape(text).replace(re.escape("{i}"), r"(?P<i>\d+)") + "$")


@lru_cache(maxsize=None)
def _matchers(family: str, naming: str, underscored: bool) -> tuple[tuple[re.Pattern, LoraName, int], ...]:
    """(pattern, entry, which diffusers module: -1 for the release's name) of every linear."""
    out = []
    for entry in ORIGINAL_FORMATS[family].lora_names:
        if naming == "original":
            out.append((_pattern(entry.original, underscored), entry, -1))
        else:
            out.extend((_pattern(d, underscored), entry, k) for k, d in enumerate(entry.diffusers))
    return tuple(out)


def _match(name: str, family: str, naming: str, underscored: bool) -> Optional[tuple[LoraName, int, str]]:
    for pat, entry, k in _matchers(family, naming, underscored):
        m = pat.match(name)
        if m:
            return entry, k, m.groupdict().get("i") or ""
    return None


def lora_naming(lora: LoraFile) -> tuple[str, str, int]:
    """(family, naming, modules matched) of the family table and naming the adapter's module names
    match most; ("", "", 0) when none matches."""
    best = ("", "", 0)
    for family in ORIGINAL_FORMATS:
        for naming in NAMINGS:
            hits = sum(_match(m.name, family, naming, lora.underscored) is not None for m in lora.modules)
            if hits > best[2]:
                best = (family, naming, hits)
    return best


def diffusers_modules(lora: LoraFile, family: str, naming: str) -> list[str]:
    """The diffusers modules ``lora``'s modules name in ``naming`` (a fused module of the release:
    each of its parts), for what ``sporch inspect`` shows; modules no linear of the family matches
    are left out (a job's plan names them)."""
    out = set()
    for m in lora.modules:
        found = _match(m.name, family, naming, lora.underscored)
        if found is not None:
            entry, k, i = found
            out.update(d.replace("{i}", i) for d in (entry.diffusers if k < 0 else entry.diffusers[k:k + 1]))
    return sorted(out)


def _present(entry: LoraName, index: str, config: Mapping[str, Any]) -> bool:
    if entry.when and not config.get(entry.when):
        return False
    if entry.blocks:
        return index != "" and int(index) < int(config.get(entry.blocks) or 0)
    return True


def linear_modules(family: str, config: Mapping[str, Any]) -> set[str]:
    """The diffusers class's linear modules a LoRA may adapt, for ``config`` (a family with a table)."""
    out = set()
    for entry in ORIGINAL_FORMATS[family].lora_names:
        indices = [str(i) for i in range(int(config.get(entry.blocks) or 0))] if entry.blocks else [""]
        for i in indices:
            if _present(entry, i, config):
                out.update(d.replace("{i}", i) for d in entry.diffusers)
    return out


def _width(config: Mapping[str, Any]) -> int:
    return int(config.get("num_attention_heads") or 0) * int(config.get("attention_head_dim") or 0)


def _fixed_split(fmt: OriginalFormat, entry: LoraName, config: Mapping[str, Any]) -> Optional[int]:
    """The converter's own width where it cuts ``entry`` at one other than the model's, else None."""
    for pattern, _, width in fmt.fixed_splits:
        if pattern == entry.original and _width(config) not in (0, width):
            return width
    return None


def _title(family: str) -> str:
    return get_family(family).title


def lora_plan(lora: LoraFile, family: str, config: Mapping[str, Any], where: str = "") -> LoraPlan:
    """How ``lora`` reaches diffusers' loader for a model of ``family`` with diffusers config
    ``config`` (module docstring); a one-line CheckpointError for an adapter the model cannot take."""
    where = where or str(lora.path)
    fmt = ORIGINAL_FORMATS.get(family)
    if fmt is None or not fmt.lora_names:
        if lora.deltas:
            raise CheckpointError(f"{where}: whole-tensor differences ({lora.deltas[0].key!r}, ...) are merged into Wan "
                                  f"models only (LightX2V's format), not {_title(family)}; use an adapter of LoRA pairs")
        return LoraPlan(family, "")
    other, _, other_hits = lora_naming(lora)
    own = max((sum(_match(m.name, family, n, lora.underscored) is not None for m in lora.modules), n) for n in NAMINGS)
    naming = own[1] if own[0] else "diffusers"
    plan = LoraPlan(family, naming)
    missing, originals = [], []
    for m in lora.modules:
        found = _match(m.name, family, naming, lora.underscored)
        if found is None or not _present(found[0], found[2], config):
            missing.append(m.name)
            continue
        entry, k, i = found
        if naming == "original":
            fixed = _fixed_split(fmt, entry, config)
            if fixed:
                raise CheckpointError(f"{where}: module {m.name!r} is the release's fused {entry.original}, which "
                                      f"diffusers' LoRA converter cuts at the width {fixed}, but the model is "
                                      f"{_width(config)} wide; use an adapter in diffusers' names")
            dotted = entry.original.replace("{i}", i)
            originals.append((entry.original, i))
            plan.targets[m.name] = tuple(d.replace("{i}", i) for d in entry.diffusers)
            stem = fmt.lora_style.prefix + (dotted.replace(".", "_") if fmt.lora_style.underscored else dotted)
            plan.renames[m.down], plan.renames[m.up] = f"{stem}.lora_down.weight", f"{stem}.lora_up.weight"
        else:
            dotted = entry.diffusers[k].replace("{i}", i)
            plan.targets[m.name] = (dotted,)
            plan.renames[m.down] = f"transformer.{dotted}.lora_A.weight"
            plan.renames[m.up] = f"transformer.{dotted}.lora_B.weight"
        alpha = _alpha_key(lora, m.down)
        if alpha:
            plan.folds[m.down] = alpha
    if missing:
        model = config.get("_class_name") or f"the {_title(family)} model"
        if other and other != family and other_hits > own[0]:
            hint = (f"it is a LoRA for {_title(other)} ({other_hits} of {len(lora.modules)} modules match its names): "
                    "use an adapter trained for this model")
        else:
            hint = "use an adapter trained for this model (its depth, its image or guidance inputs)"
        raise CheckpointError(f"{where}: {len(missing)} of the LoRA's {len(lora.modules)} target modules are not in "
                              f"{model} as linear modules ({_short(missing)}); {hint}")
    if naming == "original" and fmt.lora_check is not None:
        why = fmt.lora_check(sorted({e.replace("{i}", i) for e, i in originals}))
        if why:
            raise CheckpointError(f"{where}: {why}; use an adapter in diffusers' names")
    plan.deltas = _deltas(lora, fmt, family, config, where)
    return plan


def _alpha_key(lora: LoraFile, down: str) -> Optional[str]:
    """The ``.alpha`` tensor key beside the down key ``down``, if the file has one."""
    module, _, _ = _split(down)
    key = module + ".alpha"
    return key if key in lora.tensors else None


def _delta_patterns(fmt: OriginalFormat) -> tuple[tuple[re.Pattern, LoraName], ...]:
    out = []
    for entry in fmt.lora_names:  # a linear's weight and bias
        pat = re.escape(entry.original).replace(re.escape("{i}"), r"(?P<i>\d+)")
        out.append((re.compile(pat + r"\.(weight|bias)$"), entry))
    for entry in fmt.delta_parameters:
        out.append((re.compile(re.escape(entry.original).replace(re.escape("{i}"), r"(?P<i>\d+)") + "$"), entry))
    return tuple(out)


def _deltas(lora: LoraFile, fmt: OriginalFormat, family: str, config: Mapping[str, Any], where: str) -> dict[str, str]:
    if not lora.deltas:
        return {}
    if not fmt.delta_parameters:
        raise CheckpointError(f"{where}: whole-tensor differences ({lora.deltas[0].key!r}, ...) are merged into Wan "
                              f"models only (LightX2V's format), not {_title(family)}; use an adapter of LoRA pairs")
    patterns = _delta_patterns(fmt)
    out, missing = {}, []
    for d in lora.deltas:
        hit = None
        for pat, entry in patterns:
            m = pat.match(d.param)
            if m and _present(entry, m.groupdict().get("i") or "", config):
                hit = entry
                break
        if hit is None or lora.underscored:
            missing.append(d.param)
            continue
        out[d.key] = d.param
    if missing:
        raise CheckpointError(f"{where}: {len(missing)} of the adapter's {len(lora.deltas)} difference tensors change "
                              f"no parameter of the {_title(family)} model ({_short(missing)}); use an adapter trained "
                              "for this model")
    return out
