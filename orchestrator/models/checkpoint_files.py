"""Where a checkpoint's tensors are, from a local path in the publisher's layout.

Stdlib only: ``sporch run --local`` checks ``model.weights`` with it before starting ranks
(imported lazily); sporch.runtime.models.checkpoint loads the tensors it finds.

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
import math
import os
import stat
import struct
from dataclasses import dataclass, field, replace
from pathlib import Path, PurePosixPath
from typing import Any, BinaryIO, Optional

from sporch.orchestrator.contract.results import BadInputError
from sporch.orchestrator.safe_files import NotAFileError, open_regular

#: A safetensors header larger than this is not a header (corrupt length prefix).
MAX_HEADER_BYTES = 100 * 1024 * 1024


class CheckpointError(BadInputError):
    """A checkpoint that cannot be loaded; the message is one line naming what is wrong (a rank
    that fails with one records it as the job's bad input: contract.results)."""


@dataclass(frozen=True)
class TensorInfo:
    file: Path
    dtype: str
    shape: tuple[int, ...]
    span: tuple[int, int] = (0, 0)  # its bytes' [start, stop) in the file


@dataclass
class CheckpointFiles:
    """The tensors of one checkpoint: name -> (file, dtype, shape), plus its config.json."""

    root: Path  # the folder holding the weights (and config.json, if any)
    files: list[Path]
    tensors: dict[str, TensorInfo] = field(default_factory=dict)
    config: dict[str, Any] = field(default_factory=dict)

    def describe(self) -> str:
        return str(self.files[0]) if len(self.files) == 1 else f"{self.root} ({len(self.files)} shards)"


#: Bytes per element of every dtype a safetensors header may name (the format's own list).
DTYPE_SIZES: dict[str, int] = {
    "BOOL": 1, "U8": 1, "I8": 1, "F8_E5M2": 1, "F8_E4M3": 1, "F8_E8M0": 1,
    "I16": 2, "U16": 2, "F16": 2, "BF16": 2,
    "I32": 4, "U32": 4, "F32": 4,
    "I64": 8, "U64": 8, "F64": 8,
}


def kind(path: Path) -> Optional[str]:
    """What is at ``path`` (links followed): ``"file"`` (a regular file), ``"dir"``, ``"other"``
    (a FIFO, device, socket) or None (nothing). A folder on the way that cannot be searched, a
    name too long, a link loop: a one-line CheckpointError, never an internal error."""
    try:
        mode = os.stat(path).st_mode
    except (FileNotFoundError, NotADirectoryError):
        return None
    except OSError as exc:
        raise CheckpointError(f"cannot look at {path}: {exc.strerror or exc}") from None
    return "file" if stat.S_ISREG(mode) else "dir" if stat.S_ISDIR(mode) else "other"


def open_file(path: Path) -> BinaryIO:
    """``path`` opened for reading when it is a regular file: a FIFO (which would block), a
    device, a folder, or a file that cannot be opened is a one-line CheckpointError."""
    try:
        return open_regular(path)
    except NotAFileError as exc:
        raise CheckpointError(str(exc)) from None
    except OSError as exc:
        raise CheckpointError(f"cannot read {path}: {exc.strerror or exc}") from None


def read_file(path: Path) -> bytes:
    """The bytes of the regular file ``path`` (see :func:`open_file`); a read error is one line."""
    with open_file(path) as fh:
        try:
            return fh.read()
        except OSError as exc:
            raise CheckpointError(f"cannot read {path}: {exc.strerror or exc}") from None


def _load_json(raw: bytes | str, broken: str) -> Any:
    """JSON of a checkpoint file; ``broken`` plus the reason as one CheckpointError line for bad
    text, bad UTF-8 and nesting deep enough to exhaust the parser (a bracket bomb is a
    RecursionError in json)."""
    try:
        return json.loads(raw)
    except RecursionError:
        raise CheckpointError(f"{broken} (it nests too deeply)") from None
    except (ValueError, UnicodeDecodeError) as exc:
        raise CheckpointError(f"{broken} (not valid JSON: {exc})") from None


def _entry(path: Path, name: str, meta: Any) -> tuple[int, int, TensorInfo]:
    """(start, stop, info) of one header entry, checked as the safetensors loader checks it:
    a known dtype, non-negative shape and offsets, and exactly shape x itemsize bytes."""
    where = f"{path}: tensor {name!r}"
    try:
        dtype = str(meta["dtype"])
        shape = tuple(int(s) for s in meta["shape"])
        start, stop = (int(o) for o in meta["data_offsets"])
    except (KeyError, TypeError, ValueError):
        raise CheckpointError(f"{path} has a corrupt safetensors header entry for tensor {name!r}") from None
    if dtype not in DTYPE_SIZES:
        raise CheckpointError(f"{where} has unknown dtype {dtype!r} (known: {', '.join(DTYPE_SIZES)})")
    if any(s < 0 for s in shape) or start < 0 or stop < start:
        raise CheckpointError(f"{where} has negative sizes or offsets (shape {list(shape)}, "
                              f"data_offsets [{start}, {stop}])")
    need = math.prod(shape) * DTYPE_SIZES[dtype]
    if stop - start != need:
        raise CheckpointError(f"{where} spans {stop - start} bytes, but {dtype} x {list(shape)} needs {need}")
    return start, stop, TensorInfo(path, dtype, shape)


def read_header(path: Path) -> dict[str, TensorInfo]:
    """Tensor names, dtypes and shapes from a safetensors header, checked the way the loader
    checks them (known dtypes, byte spans that match the shapes, no overlap, no gap, the file
    exactly as long as the header says), so a bad file is refused before any rank starts."""
    return read_safetensors(path)[0]


def read_safetensors(path: Path) -> tuple[dict[str, TensorInfo], dict[str, Any]]:
    """:func:`read_header`'s tensors and the header's ``__metadata__`` (strings; {} if none),
    from one read of the header."""
    try:
        with open_file(path) as f:
            size = os.fstat(f.fileno()).st_size
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
    header = _load_json(raw, f"{path} has a corrupt safetensors header")
    if not isinstance(header, dict):
        raise CheckpointError(f"{path} has a corrupt safetensors header (not an object)")
    spans: list[tuple[int, int, str]] = []
    out: dict[str, TensorInfo] = {}
    for name, meta in header.items():
        if name == "__metadata__":
            continue
        start, stop, info = _entry(path, name, meta)
        out[name] = replace(info, span=(8 + n + start, 8 + n + stop))
        spans.append((start, stop, name))
    end = 0
    for start, stop, name in sorted(spans):
        if start < end:
            raise CheckpointError(f"{path}: tensor {name!r} overlaps the tensor before it (bytes {start}-{stop})")
        if start > end:
            raise CheckpointError(f"{path}: a gap of {start - end} bytes lies before tensor {name!r}")
        end = stop
    if 8 + n + end > size:
        raise CheckpointError(f"{path} is truncated: its header needs {8 + n + end} bytes, the file has {size}")
    if 8 + n + end < size:
        raise CheckpointError(f"{path} has {size - 8 - n - end} bytes after its last tensor (not a safetensors "
                              "file, or a broken write)")
    metadata = header.get("__metadata__")
    return out, (metadata if isinstance(metadata, dict) else {})


def _shard(index: Path, file: Any) -> Path:
    """The shard ``file`` an index names: a path inside the index's folder (no absolute path,
    no ``..``; a link inside the folder is followed, as the hub's snapshot folders need)."""
    name = str(file)
    rel = PurePosixPath(name)
    if not name or "\\" in name or "\0" in name or rel.is_absolute() or ".." in rel.parts or name.startswith("~"):
        raise CheckpointError(f"index {index} names shard {name!r} outside its folder; an index may only name "
                              f"files in {index.parent}")
    return index.parent / rel


def read_index(index: Path) -> dict[str, Path]:
    try:
        data = _load_json(read_file(index), f"broken index {index}")
        weight_map = data["weight_map"]
        if not isinstance(weight_map, dict) or not weight_map:
            raise KeyError("weight_map")
    except CheckpointError:
        raise
    except OSError as exc:
        raise CheckpointError(f"cannot read index {index}: {exc.strerror or exc}") from None
    except (ValueError, KeyError, TypeError) as exc:
        raise CheckpointError(f"broken index {index}: {type(exc).__name__} {exc}".rstrip()) from None
    return {str(name): _shard(index, file) for name, file in weight_map.items()}


def locate(path: str | Path) -> tuple[Path, list[Path], Path | None]:
    """(root folder, safetensors files, index or None) for ``model.weights``."""
    p = Path(path).expanduser()
    what = kind(p)
    if what is None:
        raise CheckpointError(f"model.weights {p} does not exist")
    if what == "other":
        raise CheckpointError(f"model.weights {p} is not a regular file or folder (a FIFO or a device); "
                              "name the checkpoint's folder or file")
    if what == "file":
        if p.name.endswith(".safetensors.index.json"):
            return p.parent, [], p
        if p.suffix == ".safetensors":
            return p.parent, [p], None
        raise CheckpointError(f"model.weights {p} is neither a .safetensors file, an index json nor a folder")
    if kind(p / "transformer") == "dir":
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
        weight_map = read_index(index)
        files = sorted(set(weight_map.values()))
        headers = {}
        for f in files:
            if kind(f) is None:
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
    if kind(cfg_path) is not None:
        config = _load_json(read_file(cfg_path), f"{cfg_path} is broken")
        if not isinstance(config, dict):
            raise CheckpointError(f"{cfg_path} is not a JSON object")
    return CheckpointFiles(root=root, files=files, tensors=tensors, config=config)
