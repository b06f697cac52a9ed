"""A checkpoint's tensors as views of its memory-mapped safetensors files: no tensor is copied
until someone reads its values, and then only the pages read come into memory (the page cache,
shared by the ranks of a node).

:class:`MappedCheckpoint` maps each file of a checkpoint (``models/checkpoint_files``: the
headers already checked) privately (copy-on-write: a write to a view never reaches the file) and
hands out ``torch.frombuffer`` views at each tensor's byte span: renaming, slicing rows,
``chunk`` and ``split`` of such a view cost nothing. A tensor whose start is not aligned to its
element size (safetensors does not promise alignment) is copied instead (rare; small).
"""

from __future__ import annotations

import mmap
from contextlib import ExitStack
from pathlib import Path

import torch

from sporch.orchestrator.models.checkpoint_files import CheckpointError, CheckpointFiles, TensorInfo

__all__ = ["DTYPES", "MappedCheckpoint"]

#: safetensors dtype names -> torch dtypes (little-endian, as the format stores them)
DTYPES: dict[str, torch.dtype] = {
    "BOOL": torch.bool, "U8": torch.uint8, "I8": torch.int8, "I16": torch.int16, "I32": torch.int32,
    "I64": torch.int64, "F16": torch.float16, "BF16": torch.bfloat16, "F32": torch.float32, "F64": torch.float64,
    "F8_E5M2": torch.float8_e5m2, "F8_E4M3": torch.float8_e4m3fn,
    **({"U16": torch.uint16, "U32": torch.uint32, "U64": torch.uint64} if hasattr(torch, "uint16") else {}),
}


class MappedCheckpoint:
    """The tensors of ``ckpt`` as views of its mapped files (see the module docstring). Use as a
    context manager or call :meth:`close`; views handed out keep their mapping alive."""

    def __init__(self, ckpt: CheckpointFiles):
        self.ckpt = ckpt
        self._stack = ExitStack()
        self._maps: dict[Path, mmap.mmap] = {}

    def __enter__(self) -> "MappedCheckpoint":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def close(self) -> None:
        self._maps.clear()  # the views still alive keep their mapping (torch holds the buffer)
        self._stack.close()

    def _map(self, path: Path) -> mmap.mmap:
        if path not in self._maps:
            try:
                fh = self._stack.enter_context(open(path, "rb"))
                self._maps[path] = mmap.mmap(fh.fileno(), 0, access=mmap.ACCESS_COPY)
            except (OSError, ValueError) as exc:
                raise CheckpointError(f"cannot map {path}: {getattr(exc, 'strerror', None) or exc}") from None
        return self._maps[path]

    def names(self) -> list[str]:
        return list(self.ckpt.tensors)

    def info(self, name: str) -> TensorInfo:
        return self.ckpt.tensors[name]

    def tensor(self, name: str) -> torch.Tensor:
        """Tensor ``name`` as a view of its file (a copy where its start is misaligned)."""
        info = self.ckpt.tensors[name]
        dtype = DTYPES.get(info.dtype)
        if dtype is None:
            raise CheckpointError(f"{info.file}: tensor {name!r} has dtype {info.dtype}, which torch cannot read")
        start, stop = info.span
        count = (stop - start) // dtype.itemsize
        if count == 0:
            return torch.empty(info.shape, dtype=dtype)
        buf = self._map(info.file)
        if start % dtype.itemsize:
            raw = torch.frombuffer(buf, dtype=torch.uint8, count=stop - start, offset=start).clone()
            return raw.view(dtype).reshape(info.shape)
        return torch.frombuffer(buf, dtype=dtype, count=count, offset=start).reshape(info.shape)

    def state_dict(self) -> dict[str, torch.Tensor]:
        """Every tensor, each a view of its file."""
        return {name: self.tensor(name) for name in self.ckpt.tensors}
