"""A LoRA adapter file, read from its safetensors header alone (stdlib only).

``read_lora(path)`` reads the header (no tensors; an ``.alpha`` scalar's few bytes) and returns a
:class:`LoraFile`: its key format (lora_keys.py) and every adapted module with its rank and alpha
(lora_alpha.py), and its whole-tensor differences; the down/up tensors are checked finite. Which
diffusers modules each names: lora_names.py. The merge is
W += scale x (alpha / rank) x up @ down (no alpha: alpha = rank; PEFT's rsLoRA: alpha / sqrt(rank)),
done by the runtime (sporch.runtime.models.lora, through the family's diffusers loader and PEFT).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Mapping, Optional

from sporch.orchestrator.models.checkpoint_files import CheckpointError, TensorInfo, kind, read_safetensors
from sporch.orchestrator.models.finite import count_nonfinite
from sporch.orchestrator.models.lora_alpha import _alpha, _file_alpha, _scalar
from sporch.orchestrator.models.lora_keys import DELTA_LEAVES, TEXT_PREFIXES, _split, _strip


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


def _short(names: list[str], n: int = 3) -> str:
    more = f" and {len(names) - n} more" if len(names) > n else ""
    return ", ".join(names[:n]) + more


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
