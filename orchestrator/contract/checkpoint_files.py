"""Where a checkpoint's tensors are, from a local path in the publisher's layout.

Stdlib only: ``sporch run --local`` checks ``model.weights`` with it before starting ranks
(imported lazily); sporch.runtime.model.keymaps loads the tensors it finds.

``model.weights`` may name

* a model directory: ``transformer/`` inside it is used when present (diffusers' pipeline
  layout, ``Wan2.1-T2V-14B-Diffusers``); then one ``*.safetensors.index.json`` (sharded) or
  exactly one ``*.safetensors`` file (``Wan2.1-T2V-1.3B``) must be there;
* a ``*.safetensors`` file (``flux1-dev.safetensors``) or a ``*.safetensors.index.json``.

Every file is checked before anything is loaded: the header parses, the file is as long as
its header says (a truncated download is caught), the index parses and each tensor it lists
is in the shard it names. Problems raise :class:`CheckpointError` with one line naming the
file or tensor. Only headers are read here; tensors are memory-mapped later (safe_open).
"""

from __future__ import annotations

import json
import struct
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

#: A safetensors header larger than this is not a header (corrupt length prefix).
MAX_HEADER_BYTES = 100 * 1024 * 1024


class CheckpointError(ValueError):
    """A checkpoint that cannot be loaded; the message is one line naming what is wrong."""


@dataclass(frozen=True)
class TensorInfo:
    file: Path
    dtype: str
    shape: tuple[int, ...]


@dataclass
class CheckpointFiles:
    """The tensors of one checkpoint: name -> (file, dtype, shape), plus its config.json."""

    root: Path  # the folder holding the weights (and config.json, if any)
    files: list[Path]
    tensors: dict[str, TensorInfo] = field(default_factory=dict)
    config: dict[str, Any] = field(default_factory=dict)

    def describe(self) -> str:
        return str(self.files[0]) if len(self.files) == 1 else f"{self.root} ({len(self.files)} shards)"


def read_header(path: Path) -> dict[str, TensorInfo]:
    """Tensor names, dtypes and shapes from a safetensors header; checks the file length."""
    try:
        size = path.stat().st_size
        with path.open("rb") as f:
            head = f.read(8)
            if len(head) < 8:
                raise CheckpointError(f"{path} is truncated or not a safetensors file ({size} bytes)")
            (n,) = struct.unpack("<Q", head)
            if n > MAX_HEADER_BYTES or 8 + n > size:
                raise CheckpointError(f"{path} is truncated or not a safetensors file (header length {n}, "
                                      f"file {size} bytes)")
            raw = f.read(n)
    except OSError as exc:
        raise CheckpointError(f"cannot read {path}: {exc.strerror or exc}") from None
    try:
        header = json.loads(raw)
        if not isinstance(header, dict):
            raise ValueError("not an object")
    except (ValueError, UnicodeDecodeError) as exc:
        raise CheckpointError(f"{path} has a corrupt safetensors header ({exc})") from None
    out: dict[str, TensorInfo] = {}
    end = 0
    for name, meta in header.items():
        if name == "__metadata__":
            continue
        try:
            start, stop = (int(o) for o in meta["data_offsets"])
            out[name] = TensorInfo(path, str(meta["dtype"]), tuple(int(s) for s in meta["shape"]))
        except (KeyError, TypeError, ValueError):
            raise CheckpointError(f"{path} has a corrupt safetensors header entry for tensor {name!r}") from None
        end = max(end, stop)
    if 8 + n + end > size:
        raise CheckpointError(f"{path} is truncated: its header needs {8 + n + end} bytes, the file has {size}")
    return out


def _read_index(index: Path) -> dict[str, Path]:
    try:
        data = json.loads(index.read_text(encoding="utf-8"))
        weight_map = data["weight_map"]
        if not isinstance(weight_map, dict) or not weight_map:
            raise KeyError("weight_map")
    except OSError as exc:
        raise CheckpointError(f"cannot read index {index}: {exc.strerror or exc}") from None
    except (ValueError, KeyError, TypeError) as exc:
        raise CheckpointError(f"broken index {index}: {type(exc).__name__} {exc}".rstrip()) from None
    return {str(name): index.parent / str(file) for name, file in weight_map.items()}


def locate(path: str | Path) -> tuple[Path, list[Path], Path | None]:
    """(root folder, safetensors files, index or None) for ``model.weights``."""
    p = Path(path).expanduser()
    if not p.exists():
        raise CheckpointError(f"model.weights {p} does not exist")
    if p.is_file():
        if p.name.endswith(".safetensors.index.json"):
            return p.parent, [], p
        if p.suffix == ".safetensors":
            return p.parent, [p], None
        raise CheckpointError(f"model.weights {p} is neither a .safetensors file, an index json nor a folder")
    if (p / "transformer").is_dir():
        p = p / "transformer"
    indexes = sorted(p.glob("*.safetensors.index.json"))
    if len(indexes) > 1:
        raise CheckpointError(f"{p} holds several indexes ({', '.join(i.name for i in indexes)}); "
                              "point model.weights at one of them")
    if indexes:
        return p, [], indexes[0]
    files = sorted(p.glob("*.safetensors"))
    if not files:
        raise CheckpointError(f"{p} holds no *.safetensors file (nor transformer/ with one)")
    if len(files) > 1:
        raise CheckpointError(f"{p} holds several .safetensors files and no index "
                              f"({', '.join(f.name for f in files)}); point model.weights at one file")
    return p, files, None


def open_checkpoint(path: str | Path) -> CheckpointFiles:
    """Locate and check every file of the checkpoint at ``path`` (headers only)."""
    root, files, index = locate(path)
    tensors: dict[str, TensorInfo] = {}
    if index is not None:
        weight_map = _read_index(index)
        files = sorted(set(weight_map.values()))
        headers = {}
        for f in files:
            if not f.is_file():
                raise CheckpointError(f"index {index} lists shard {f.name}, which is missing")
            headers[f] = read_header(f)
        for name, f in weight_map.items():
            if name not in headers[f]:
                raise CheckpointError(f"index {index} puts tensor {name!r} in {f.name}, which does not hold it")
            tensors[name] = headers[f][name]
    else:
        tensors = read_header(files[0])
    config: dict[str, Any] = {}
    cfg_path = root / "config.json"
    if cfg_path.is_file():
        try:
            config = json.loads(cfg_path.read_text(encoding="utf-8"))
        except ValueError as exc:
            raise CheckpointError(f"{cfg_path} is not valid JSON ({exc})") from None
    return CheckpointFiles(root=root, files=files, tensors=tensors, config=config)
