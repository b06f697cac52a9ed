"""LoRA adapter files: what they adapt, from the safetensors header alone (stdlib only).

``read_lora(path)`` reads the header (no tensors; an ``.alpha`` scalar's few bytes) and returns a
:class:`LoraFile`: its key format and every adapted module with its rank and alpha. The formats:

* ``peft``: diffusers/PEFT, ``<prefix><module>.lora_A.weight`` / ``.lora_B.weight`` (prefix
  ``transformer.``, ``diffusion_model.`` or none), optional ``<module>.alpha``; an alpha of the
  whole file may sit in the header metadata ``lora_adapter_metadata`` (``transformer.lora_alpha``,
  ``transformer.alpha_pattern``), as diffusers' ``save_lora_weights`` writes it;
* ``kohya``: ``lora_unet_<module, dots as underscores>.lora_down.weight`` / ``.lora_up.weight`` /
  ``.alpha`` (sd-scripts, musubi-tuner, ai-toolkit's ``lora_transformer_`` prefix), or the same
  suffixes on dotted names.

Module names may be the original release's (Flux ``double_blocks.0.img_attn.qkv``, Wan
``blocks.0.self_attn.q``) or diffusers' (``transformer_blocks.0.attn.to_q``,
``blocks.0.attn1.to_q``); :func:`map_targets` matches them against the model family's name table
(keymap.py) and says which of sporch's parameters each one changes, where a fused parameter
holds it (``part`` of ``parts``, the transform's row layout) or refuses the targets the model
lacks in one line. The merge is W += scale x (alpha / rank) x up @ down (no alpha: alpha = rank;
PEFT's rsLoRA: alpha / sqrt(rank)),
done by the runtime (sporch.runtime.model.lora).
"""

from __future__ import annotations

import math
import re
import struct
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping, Optional

from sporch.orchestrator.models.checkpoint_files import (CheckpointError, TensorInfo, _load_json, kind, open_file, read_header,
                               read_safetensors)
from sporch.orchestrator.models.finite import count_nonfinite
from sporch.orchestrator.contract.vocab import LORA_EXPERTS
from sporch.orchestrator.models import flux, preset_knobs, wan
from sporch.orchestrator.models.keymap import Rule, Table

#: Name tables by family, as the model's attention kind selects them.
FAMILIES: dict[str, Table] = {"cross": wan.TABLE, "joint": flux.TABLE}

#: Which transformer of a two-expert model (Wan2.2 A14B) an entry of ``model.lora`` adapts.
EXPERTS = LORA_EXPERTS

#: Prefixes a module name may carry (stripped); the kohya ones mark underscored names.
DOTTED_PREFIXES = ("base_model.model.", "transformer.", "diffusion_model.", "model.diffusion_model.")
KOHYA_PREFIXES = ("lora_unet_", "lora_transformer_")
#: Prefixes of adapters on the text encoders, which sporch does not adapt.
TEXT_PREFIXES = ("lora_te_", "lora_te1_", "lora_te2_", "text_encoder.", "text_encoder_2.")

SUFFIXES = {".lora_A.weight": ("peft", "down"), ".lora_B.weight": ("peft", "up"),
            ".lora_down.weight": ("kohya", "down"), ".lora_up.weight": ("kohya", "up"),
            ".alpha": (None, "alpha"),
            # whole-tensor differences beside the LoRA pairs (LightX2V's step-distill adapters, as
            # published with the original Wan2.1 names): a module's weight, its bias, and a
            # block's modulation table
            ".diff_b": (None, "diff_b"), ".diff_m": (None, "diff_m"), ".diff": (None, "diff")}
#: The parameter of the module (or block) a difference key changes.
DELTA_LEAVES = {"diff": "weight", "diff_b": "bias", "diff_m": "modulation"}


@dataclass(frozen=True)
class LoraModule:
    """One adapted module: its name as the file writes it (prefix stripped), its tensors."""

    name: str
    down: str  # tensor key [rank, in]
    up: str  # tensor key [out, rank]
    rank: int
    shape: tuple[int, int]  # (out, in) of the weight it changes
    alpha: Optional[float]  # None: alpha = rank (scale 1)
    rslora: bool = False  # PEFT's use_rslora: alpha / sqrt(rank)

    @property
    def factor(self) -> float:
        """alpha / rank (rsLoRA: alpha / sqrt(rank)): what up @ down is multiplied by (before
        the job's scale)."""
        alpha = self.rank if self.alpha is None else self.alpha
        return alpha / (math.sqrt(self.rank) if self.rslora else self.rank)


@dataclass(frozen=True)
class LoraDelta:
    """A whole-tensor difference: ``P += scale x delta`` for the parameter ``param`` (the file's
    module name, prefix stripped, plus ``weight`` / ``bias`` / ``modulation``)."""

    param: str
    key: str  # tensor key
    shape: tuple[int, ...]


@dataclass
class LoraFile:
    path: Path
    format: str  # peft | kohya
    underscored: bool  # kohya's flattened module names
    modules: list[LoraModule] = field(default_factory=list)
    tensors: dict[str, TensorInfo] = field(default_factory=dict, repr=False)  # the file's header
    deltas: list[LoraDelta] = field(default_factory=list)  # .diff / .diff_b / .diff_m tensors

    @property
    def ranks(self) -> list[int]:
        return sorted({m.rank for m in self.modules})

    @property
    def alphas(self) -> list[Optional[float]]:
        return sorted({m.alpha for m in self.modules}, key=lambda a: (a is None, a or 0.0))


@dataclass(frozen=True)
class Target:
    """Where one adapted module lands in sporch's model."""

    module: LoraModule
    ours: str  # sporch's module (its ``.weight`` is changed)
    part: int  # which of the rule's sources (rows stacked by ``cat``)
    parts: int
    transform: str  # the name table's transform for this format


def _short(names: list[str], n: int = 3) -> str:
    more = f" and {len(names) - n} more" if len(names) > n else ""
    return ", ".join(names[:n]) + more


def _scalar(info: TensorInfo, key: str) -> float:
    """The value of a one-element tensor, read from its bytes (no torch)."""
    start, stop = info.span
    with open_file(info.file) as f:
        f.seek(start)
        raw = f.read(stop - start)
    codes = {"F32": "<f", "F64": "<d", "F16": "<e", "I64": "<q", "I32": "<i"}
    if info.dtype == "BF16" and len(raw) == 2:
        return struct.unpack("<f", b"\x00\x00" + raw)[0]
    if info.dtype not in codes or len(raw) != struct.calcsize(codes[info.dtype]):
        raise CheckpointError(f"{info.file}: alpha {key!r} is a {info.dtype} x {list(info.shape)} tensor, "
                              "expected one number")
    return float(struct.unpack(codes[info.dtype], raw)[0])


#: The largest alpha an adapter may state (alpha / rank scales the update: a typo's 1e30 is refused).
MAX_ALPHA = 1e6


def _alpha(value: Any, what: str, path: Path) -> float:
    """An alpha from the file (its metadata or an ``.alpha`` tensor): a finite number in (0, MAX_ALPHA]."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise CheckpointError(f"LoRA file {path}: {what} {value!r} must be a number (the adapter's alpha, "
                              "e.g. 16)")
    if not math.isfinite(value) or not 0 < value <= MAX_ALPHA:
        raise CheckpointError(f"LoRA file {path}: {what} {value!r} must be finite, greater than 0 and at most "
                              f"{MAX_ALPHA:g} (the adapter's alpha, e.g. 16)")
    return float(value)


def _flag(value: Any, what: str, path: Path) -> bool:
    if value is not None and not isinstance(value, bool):
        raise CheckpointError(f"LoRA file {path}: {what} {value!r} in its lora_adapter_metadata must be true or "
                              "false")
    return bool(value)


def _file_alpha(meta: Mapping[str, Any], path: Path) -> tuple[Optional[float], dict[str, float], bool]:
    """The alpha of the whole adapter, per-module patterns and rsLoRA from diffusers' metadata
    (the PEFT LoraConfig of the transformer), each value checked; DoRA is refused."""
    raw = meta.get("lora_adapter_metadata")
    if not raw:
        return None, {}, False
    data = _load_json(raw, f"{path}: its lora_adapter_metadata is broken")
    if not isinstance(data, dict):
        raise CheckpointError(f"LoRA file {path}: its lora_adapter_metadata is not a JSON object (a PEFT "
                              "LoraConfig as diffusers' save_lora_weights writes it)")

    def get(key: str) -> Any:
        return data.get(f"transformer.{key}", data.get(key))

    if _flag(get("use_dora"), "use_dora", path):
        raise CheckpointError(f"LoRA file {path} is a DoRA adapter (use_dora in its metadata); sporch merges plain LoRA")
    alpha, pattern = get("lora_alpha"), get("alpha_pattern")
    if pattern is None:
        pattern = {}
    if not isinstance(pattern, dict):
        raise CheckpointError(f"LoRA file {path}: alpha_pattern {pattern!r} in its lora_adapter_metadata must be an "
                              "object of module name -> alpha")
    return ((None if alpha is None else _alpha(alpha, "lora_alpha", path)),
            {str(k): _alpha(v, f"alpha_pattern[{k!r}]", path) for k, v in pattern.items()},
            _flag(get("use_rslora"), "use_rslora", path))


def _split(key: str) -> tuple[str, Optional[str], str]:
    for suffix, (fmt, role) in SUFFIXES.items():
        if key.endswith(suffix):
            return key[: -len(suffix)], fmt, role
    raise KeyError(key)


def _strip(name: str) -> tuple[str, bool]:
    for p in KOHYA_PREFIXES:
        if name.startswith(p):
            return name[len(p):], True
    for p in DOTTED_PREFIXES:
        if name.startswith(p):
            return name[len(p):], False
    return name, False


def read_lora(path: str | Path) -> LoraFile:
    """The adapter at ``path`` (a ``.safetensors`` file), checked: every module has its down and
    up tensors of one rank, only LoRA keys are present. One-line CheckpointError otherwise."""
    p = Path(path).expanduser()
    what = kind(p)
    if what != "file":
        raise CheckpointError(f"LoRA file {p} does not exist; fix model.lora[].path (relative paths start at the "
                              "job file's folder)" if what is None else
                              f"LoRA {p} is not a file; point model.lora[].path at the adapter's .safetensors")
    if p.suffix != ".safetensors":
        raise CheckpointError(f"LoRA file {p} is not a .safetensors file (sporch reads adapters in safetensors only)")
    tensors, metadata = read_safetensors(p)
    if not tensors:
        raise CheckpointError(f"LoRA file {p} holds no tensors")
    text = sorted(k for k in tensors if k.startswith(TEXT_PREFIXES))
    if text:
        raise CheckpointError(f"LoRA file {p} adapts the text encoder ({len(text)} tensors, e.g. {text[0]!r}); "
                              "sporch merges adapters into the transformer only: use an adapter without them")
    parts: dict[str, dict[str, str]] = {}
    formats, flat, other = set(), set(), []
    for key in tensors:
        try:
            module, fmt, role = _split(key)
        except KeyError:
            other.append(key)
            continue
        name, underscored = _strip(module)
        flat.add(underscored)
        if fmt:
            formats.add(fmt)
        parts.setdefault(name, {})[role] = key
    if other:
        raise CheckpointError(f"LoRA file {p} has {len(other)} key(s) that are no LoRA down/up/alpha tensor or "
                              f"diff/diff_b/diff_m difference ({_short(sorted(other))}); sporch merges LoRA pairs and "
                              "whole-tensor differences (no DoRA)")
    deltas = []
    for name, roles in sorted(parts.items()):
        for role, leaf in DELTA_LEAVES.items():
            if role in roles:
                key = roles.pop(role)
                deltas.append(LoraDelta(f"{name}.{leaf}", key, tuple(tensors[key].shape)))
    parts = {name: roles for name, roles in parts.items() if roles}
    if not formats and deltas and not parts:
        formats.add("kohya")  # differences only: dotted names, as the original release writes them
    if len(formats) != 1 or len(flat) != 1:
        raise CheckpointError(f"LoRA file {p} mixes key formats ({', '.join(sorted(formats)) or 'none'}); "
                              "expected lora_A/lora_B (diffusers/PEFT) or lora_down/lora_up (kohya)")
    file_alpha, pattern, rslora = _file_alpha(metadata, p)
    modules = []
    for name, roles in sorted(parts.items()):
        if "down" not in roles or "up" not in roles:
            lacking = "down" if "down" not in roles else "up"
            raise CheckpointError(f"LoRA file {p}: module {name!r} has no {lacking} tensor")
        down, up = tensors[roles["down"]].shape, tensors[roles["up"]].shape
        if len(down) != 2 or len(up) != 2 or down[0] != up[1]:
            raise CheckpointError(f"LoRA file {p}: module {name!r} has down {list(down)} and up {list(up)}, "
                                  "which are no rank-r pair ([r, in] and [out, r])")
        if min(*down, *up) < 1:
            raise CheckpointError(f"LoRA file {p}: module {name!r} has down {list(down)} and up {list(up)}: a rank "
                                  "and widths of at least 1 are needed (a rank-0 adapter changes nothing)")
        alpha = _alpha(_scalar(tensors[roles["alpha"]], roles["alpha"]), f"alpha tensor {roles['alpha']!r}", p) \
            if "alpha" in roles else next((a for k, a in pattern.items() if name == k or name.endswith("." + k)),
                                          file_alpha)
        modules.append(LoraModule(name, roles["down"], roles["up"], down[0], (up[0], down[1]), alpha, rslora))
    _check_finite(p, tensors, [key for m in modules for key in (m.down, m.up)])
    return LoraFile(p, formats.pop(), flat.pop(), modules, tensors, deltas)


def _check_finite(path: Path, tensors: Mapping[str, TensorInfo], keys: list[str]) -> None:
    """Refuse a LoRA file any of whose down/up tensors holds NaN or inf (read from its bytes)."""
    try:
        with path.open("rb") as f:
            for key in keys:
                bad = count_nonfinite(tensors[key], f)
                if bad:
                    n = math.prod(tensors[key].shape)
                    raise CheckpointError(f"LoRA file {path}: tensor {key!r} holds {bad} NaN or inf value(s) of {n}; "
                                          "the adapter is corrupt (re-export or re-download it)")
    except OSError as exc:
        raise CheckpointError(f"cannot read LoRA file {path}: {exc.strerror or exc}") from None


def for_expert(entries: Optional[list], index: int) -> list:
    """The ``plan.model.lora`` entries that adapt transformer ``index`` (0: ``transformer``, the
    only one of most models; 1: Wan2.2's ``transformer_2``)."""
    return [e for e in entries or () if e.get("expert", "both") in ("both", EXPERTS[1 + index])]


# -- the model's names ----------------------------------------------------------------------
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


def module_names(model: Mapping[str, Any]) -> set[str]:
    """sporch's linear modules of a ``plan.model`` dict, by the family's name table: the block
    rules for each block index, and the optional inputs only where the model has them (Wan's
    image embedding, Flux's guidance embedding)."""
    table = FAMILIES.get(model.get("attention", ""))
    if table is None:
        return set()
    knobs = {**preset_knobs(model.get("preset")), **dict(model.get("knobs") or {})}  # as plan/estimates.py reads them
    image = bool(knobs.get("image_dim"))
    guidance = bool(model.get("guidance_embed"))  # the planner records it for every preset and checkpoint
    counts = {"blocks.": model.get("depth", 0), "double_blocks.": model.get("depth", 0),
              "single_blocks.": model.get("single_depth", 0)}
    names = set()
    for r in table.rules:
        if r.ours.startswith(("img_emb.",)) or "_img" in r.ours:
            if not image:
                continue
        if r.ours.startswith("guidance_in.") and not guidance:
            continue
        if "{i}" in r.ours:
            n = next(int(c) for prefix, c in counts.items() if r.ours.startswith(prefix))
            names.update(r.ours.replace("{i}", str(i)) for i in range(n))
        else:
            names.add(r.ours)
    return names


# -- a report (sporch inspect) ----------------------------------------------------------------
def is_lora(path: str | Path) -> bool:
    """Whether the safetensors file at ``path`` holds LoRA tensors (down/up keys)."""
    p = Path(path).expanduser()
    if not (p.suffix == ".safetensors" and kind(p) == "file"):
        return False
    return any(k.endswith(tuple(s for s in SUFFIXES if s != ".alpha")) for k in read_header(p))


def _ranges(indices: list[int]) -> str:
    """[0, 1, 2, 5] -> '0-2,5'."""
    out, start = [], None
    for a, b in zip([None, *indices], [*indices, None]):
        if start is None:
            start = b
        elif b is None or b != a + 1:
            out.append(f"{start}" if start == a else f"{start}-{a}")
            start = b
    return ",".join(out)


def compact_names(names: list[str]) -> list[str]:
    """Module names with their block index folded: ``blocks.{0-29}.attn1.to_q`` (``_`` kept in kohya's)."""
    groups: dict[str, list[int]] = {}
    for n in names:
        m = re.search(r"(?<=[._])(\d+)(?=[._])", n)
        key = n if m is None else n[: m.start()] + "{}" + n[m.end():]
        groups.setdefault(key, []).append(-1 if m is None else int(m.group(1)))
    out = []
    for key, idx in sorted(groups.items()):
        out.append(key if idx == [-1] else key.replace("{}", "{" + _ranges(sorted(set(idx))) + "}"))
    return out


def describe_lora(path: str | Path) -> dict[str, Any]:
    """What ``sporch inspect`` says about a LoRA file: format, ranks, alphas, targets, family."""
    lora = read_lora(path)
    kind, names, hits = adapter_naming(lora)
    dtypes: dict[str, int] = {}
    for info in lora.tensors.values():
        dtypes[info.dtype] = dtypes.get(info.dtype, 0) + 1
    params = sum(m.rank * (m.shape[0] + m.shape[1]) for m in lora.modules)
    family = FAMILIES[kind].model if kind else None
    targets: Optional[list[str]] = None
    if kind:
        try:
            targets = compact_names(sorted({t.ours for t in map_targets(lora, kind)}))
        except CheckpointError:
            targets = None  # some modules match no name of the family: the job's plan says which
    return {"path": str(lora.path), "kind": "lora", "format": lora.format,
            "key_style": "underscored" if lora.underscored else "dotted",
            "names": names or None, "architecture": family, "matched": hits, "modules": len(lora.modules),
            "ranks": lora.ranks, "alphas": lora.alphas, "factors": sorted({m.factor for m in lora.modules}),
            "parameters": params, "dtypes": dtypes, "targets": compact_names([m.name for m in lora.modules]),
            "sporch_modules": targets}
