"""Non-finite values (NaN, inf) in a safetensors tensor, counted from its bytes (standard library
only: the planner checks a LoRA file's tensors on a login node without torch).

A float is non-finite when its exponent bits are all ones. Each dtype's exponent sits at known bits
of known bytes of an element (little-endian), so the count needs no per-element Python: the bytes
at one position of every element are mapped to 0/1 by a translation table, read as one integer,
and the integers of the positions the exponent spans are ANDed; the set bits are the non-finite
elements. Integer and bool tensors are always finite.
"""

from __future__ import annotations

from typing import BinaryIO

from sporch.orchestrator.models.checkpoint_files import DTYPE_SIZES, TensorInfo

#: dtype -> (byte, mask) pairs: an element is non-finite when ``byte & mask == mask`` for every pair
#: (its exponent all ones). float8_e4m3fn has no inf and one NaN pattern (S.1111.111); E8M0's NaN is 0xFF.
EXPONENT_BYTES: dict[str, tuple[tuple[int, int], ...]] = {
    "F64": ((7, 0x7F), (6, 0xF0)), "F32": ((3, 0x7F), (2, 0x80)), "BF16": ((1, 0x7F), (0, 0x80)),
    "F16": ((1, 0x7C),), "F8_E5M2": ((0, 0x7C),), "F8_E4M3": ((0, 0x7F),), "F8_E8M0": ((0, 0xFF),),
}
#: Bytes read at a time (a multiple of every element size).
CHUNK = 1 << 24

_TABLES = {mask: bytes(1 if b & mask == mask else 0 for b in range(256))
           for pairs in EXPONENT_BYTES.values() for _, mask in pairs}


def count_nonfinite_bytes(raw: bytes, dtype: str) -> int:
    """Elements of ``raw`` (whole elements of ``dtype``) that are NaN or inf."""
    pairs = EXPONENT_BYTES.get(dtype)
    if not pairs or not raw:
        return 0
    size = DTYPE_SIZES[dtype]
    hits = -1
    for index, mask in pairs:
        column = raw[index::size].translate(_TABLES[mask])
        if 1 not in column:
            return 0
        hits &= int.from_bytes(column, "little")
    return hits.bit_count()


def count_nonfinite(info: TensorInfo, handle: BinaryIO | None = None) -> int:
    """NaN or inf elements of the tensor ``info`` describes, read from its file in chunks
    (``handle``: the file, open for binary reading; else it is opened here)."""
    if info.dtype not in EXPONENT_BYTES:
        return 0
    start, stop = info.span
    if handle is None:
        with info.file.open("rb") as f:
            return count_nonfinite(info, f)
    handle.seek(start)
    total, left = 0, stop - start
    while left > 0:
        raw = handle.read(min(CHUNK, left))
        if not raw:
            break
        total += count_nonfinite_bytes(raw, info.dtype)
        left -= len(raw)
    return total
