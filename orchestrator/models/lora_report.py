"""What ``sporch inspect`` says about a LoRA file (stdlib only): whether a safetensors file is one,
its format, ranks, alphas and targets, the module names folded by block index.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from sporch.orchestrator.models.checkpoint_files import kind, read_header
from sporch.orchestrator.models.lora_file import read_lora
from sporch.orchestrator.models.lora_keys import SUFFIXES
from sporch.orchestrator.models.families import get_family
from sporch.orchestrator.models.lora_names import diffusers_modules, lora_naming


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
    family, names, hits = lora_naming(lora)
    dtypes: dict[str, int] = {}
    for info in lora.tensors.values():
        dtypes[info.dtype] = dtypes.get(info.dtype, 0) + 1
    params = sum(m.rank * (m.shape[0] + m.shape[1]) for m in lora.modules)
    targets = compact_names(diffusers_modules(lora, family, names)) if family else None
    return {"path": str(lora.path), "kind": "lora", "format": lora.format,
            "key_style": "underscored" if lora.underscored else "dotted",
            "names": names or None, "architecture": get_family(family).title if family else None, "matched": hits, "modules": len(lora.modules),
            "ranks": lora.ranks, "alphas": lora.alphas, "factors": sorted({m.factor for m in lora.modules}),
            "parameters": params, "dtypes": dtypes, "targets": compact_names([m.name for m in lora.modules]),
            "diffusers_modules": targets or None}
