"""Where each parameter of the diffusers class comes from in a checkpoint: its rows, as runs of rows
of the checkpoint's tensors, found by running diffusers' own single-file converter.

A diffusers checkpoint maps name to name. An original release's (``families/<family>.ORIGINAL``:
Wan-Video's ``WanModel``, Black Forest Labs' Flux) is mapped by the converter diffusers'
``from_single_file`` runs (``diffusers.loaders.single_file_utils``): renames, and for Flux q|k|v
(and the single blocks' MLP input) cut out of fused rows and the output modulation's halves
swapped. Those converters only move whole rows (dim 0) and rename, but they copy as they go
(``torch.cat([part])`` of every cut), which on the weights themselves would cost a second copy of
most of Flux per rank. So the converter runs on **row labels** instead of weights: each tensor of
the checkpoint is replaced by an int64 tensor of its shape's first dimension (other dimensions
kept at 1), holding ``(tensor index << 32) | row``; whatever the converter does to the rows it
does to the labels, and its output says, for every parameter, which rows of which tensors make it
up (:class:`RowSource`). The loader (``checkpoint.py``) then copies each rank's rows straight from
the memory-mapped file. A converter that did anything but move rows would scramble the labels,
and is refused.

``fixed_splits``: where the converter cuts rows at a width of its own (Flux's ``linear1`` at
Flux.1's 3072), a model of another width gets its parts padded with label -1 to the converter's
sizes; the padding is dropped after (an adapter for models narrower than the converter assumes).
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from typing import Mapping

import torch

from sporch.orchestrator.models.checkpoint_files import CheckpointError
from sporch.orchestrator.models.checkpoint_format import CheckpointFormat

__all__ = ["RowRun", "RowSource", "row_sources"]

PAD = -1
_SHIFT = 32


@dataclass(frozen=True)
class RowRun:
    """Rows ``[start, stop)`` of checkpoint tensor ``tensor``."""

    tensor: str
    start: int
    stop: int


@dataclass(frozen=True)
class RowSource:
    """A parameter's rows, in order, as runs of rows of checkpoint tensors (all of one shape past dim 0)."""

    runs: tuple[RowRun, ...]
    rows: int  # total rows
    tail: tuple[int, ...]  # the shape past dim 0 (the source tensors'); () for a 0-d tensor
    scalar: bool = False  # a 0-d parameter (one run of one row)

    @property
    def shape(self) -> tuple[int, ...]:
        return () if self.scalar else (self.rows, *self.tail)

    def runs_for(self, start: int, stop: int) -> list[RowRun]:
        """The runs that make rows ``[start, stop)`` of the parameter."""
        out, at = [], 0
        for run in self.runs:
            n = run.stop - run.start
            lo, hi = max(start, at), min(stop, at + n)
            if lo < hi:
                out.append(RowRun(run.tensor, run.start + lo - at, run.start + hi - at))
            at += n
        return out


def _identity(shapes: Mapping[str, tuple], prefix: str) -> dict[str, RowSource]:
    out = {}
    for name, shape in shapes.items():
        rows = shape[0] if shape else 1
        out[name[len(prefix):] if prefix and name.startswith(prefix) else name] = RowSource(
            (RowRun(name, 0, rows),), rows, tuple(shape[1:]), scalar=not shape)
    return out


def _labels(index: int, shape: tuple) -> torch.Tensor:
    if not shape:
        return torch.tensor(index << _SHIFT, dtype=torch.int64)
    rows = torch.arange(shape[0], dtype=torch.int64) + (index << _SHIFT)
    return rows.reshape(shape[0], *([1] * (len(shape) - 1)))


def _padded(labels: torch.Tensor, parts: tuple[int, ...], width: int, fixed: int, name: str) -> torch.Tensor:
    """``labels`` cut in ``parts`` x ``width`` rows, each part padded with PAD to ``parts`` x ``fixed``."""
    if labels.shape[0] != sum(parts) * width:
        raise CheckpointError(f"tensor {name!r} has {labels.shape[0]} rows, expected {sum(parts)} x the width {width}")
    if width > fixed:
        raise CheckpointError(f"tensor {name!r}: a model {width} wide is wider than diffusers' converter assumes "
                              f"({fixed}); sporch cannot map it")
    out = torch.full((sum(parts) * fixed, *labels.shape[1:]), PAD, dtype=torch.int64)
    at = 0
    for k, part in enumerate(parts):
        dst = sum(parts[:k]) * fixed
        out[dst: dst + part * width] = labels[at: at + part * width]
        at += part * width
    return out


def _decode(name: str, labels: torch.Tensor, names: list[str], shapes: Mapping[str, tuple]) -> RowSource:
    """The runs a converted label tensor names (PAD rows dropped)."""
    if labels.dtype != torch.int64 or any(s != 1 for s in labels.shape[1:]):
        raise CheckpointError(f"diffusers' converter did more than move rows for {name!r}; sporch cannot map it")
    flat = labels.reshape(-1)
    flat = flat[flat != PAD]
    index, row = flat >> _SHIFT, flat & ((1 << _SHIFT) - 1)
    if flat.numel() and (int(index.min()) < 0 or int(index.max()) >= len(names)):
        raise CheckpointError(f"diffusers' converter changed the values of {name!r}; sporch cannot map it")
    # a run breaks where the tensor changes or the rows stop following on
    breaks = torch.ones_like(flat, dtype=torch.bool)
    breaks[1:] = (index[1:] != index[:-1]) | (row[1:] != row[:-1] + 1)
    starts = torch.nonzero(breaks).reshape(-1).tolist() + [flat.numel()]
    runs = []
    for a, b in zip(starts[:-1], starts[1:]):
        src, first = names[int(index[a])], int(row[a])
        runs.append(RowRun(src, first, first + (b - a)))
    tails = {tuple(shapes[r.tensor][1:]) for r in runs}
    if len(tails) > 1:
        raise CheckpointError(f"{name!r} stacks rows of tensors of different widths; sporch cannot map it")
    return RowSource(tuple(runs), flat.numel(), tails.pop() if tails else (), scalar=labels.ndim == 0)


def _converter(fmt: CheckpointFormat):
    from diffusers.loaders import single_file_utils

    return getattr(single_file_utils, fmt.original.converter)


def _fixed(fmt: CheckpointFormat, shapes: Mapping[str, tuple]) -> list[tuple[re.Pattern, tuple[int, ...], int, int]]:
    """(name pattern, parts, model width, converter width) of each fixed split the model needs padded."""
    cfg = fmt.config
    width = int(cfg.get("num_attention_heads", 0)) * int(cfg.get("attention_head_dim", 0))
    out = []
    for pattern, parts, fixed in fmt.original.fixed_splits:
        if width and width != fixed:
            regex = re.compile(re.escape(fmt.prefix + pattern).replace(r"\{i\}", r"\d+") + r"\.(weight|bias)$")
            out.append((regex, parts, width, fixed))
    return out


def row_sources(fmt: CheckpointFormat, shapes: Mapping[str, tuple]) -> dict[str, RowSource]:
    """Every parameter the checkpoint of format ``fmt`` (tensor ``shapes`` from its headers) fills,
    in the diffusers class's names, with the checkpoint rows it is made of (module docstring)."""
    if fmt.original is None:
        return _identity(shapes, "")
    names = list(shapes)
    fixed = _fixed(fmt, shapes)
    labelled = {}
    for i, name in enumerate(names):
        labels = _labels(i, tuple(shapes[name]))
        for regex, parts, width, size in fixed:
            if regex.match(name):
                labels = _padded(labels, parts, width, size, name)
        labelled[name] = labels
    try:
        converted = _converter(fmt)(labelled)
    except (KeyError, IndexError, RuntimeError, ValueError) as exc:
        what = f"lacks tensor {exc.args[0]!r}" if isinstance(exc, KeyError) else f"does not convert ({exc})"
        raise CheckpointError(f"the {fmt.original.release} checkpoint {what}; it is incomplete or another "
                              "model".splitlines()[0]) from None
    out = {name: _decode(name, t, names, shapes) for name, t in converted.items()}
    used = {run.tensor for src in out.values() for run in src.runs}
    unused = [n for n in names if n not in used and math.prod(shapes[n] or (1,)) > 0]  # Flux's leaves extras
    if unused:
        more = f" and {len(unused) - 1} more" if len(unused) > 1 else ""
        raise CheckpointError(f"the {fmt.original.release} checkpoint has tensor {unused[0]!r}{more}, which diffusers' "
                              f"converter does not map into {fmt.class_name}; the checkpoint is of another model")
    return out
