"""A LoRA adapter's alpha, checked (stdlib only): from an ``.alpha`` tensor's bytes, or from the
header metadata ``lora_adapter_metadata`` (``transformer.lora_alpha``, ``transformer.alpha_pattern``,
``use_rslora``), as diffusers' ``save_lora_weights`` writes it; DoRA is refused. Read by
lora_file.py (:func:`~.lora_file.read_lora`).
"""

from __future__ import annotations

import math
import struct
from pathlib import Path
from typing import Any, Mapping, Optional

from sporch.orchestrator.models.checkpoint_files import CheckpointError, TensorInfo, _load_json, open_file


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
