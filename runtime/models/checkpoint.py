"""Fill a diffusers transformer's parameters from a checkpoint in any format sporch reads, each rank
only its rows, never a second copy of the model.

:func:`open_weights` checks every file (``models/checkpoint_files``: headers, lengths, index) and
decides the format and the diffusers config (``models/checkpoint_format``: diffusers, or an
original release mapped by diffusers' converter). :func:`fill_parameters` then, strictly:

* every parameter (and persistent buffer) of the model has a source, and every tensor of the
  checkpoint lands somewhere (none missing, none unexpected: one line naming the first, and how
  many more);
* each source has the parameter's shape (one line naming both);
* each parameter's rows (a sharded FSDP2 parameter: this rank's rows only; ``shards.local_rows``)
  are copied, cast to its dtype, straight from the memory-mapped file (``mapped.py``: a view per
  tensor, the rows sliced from it) into the already allocated parameter, one run of rows at a time;
* the copy is checked for NaN and inf as it is made: a non-finite weight in the file is corrupt,
  a finite one that overflows the run's dtype asks for a wider ``workload.dtype`` (one line naming
  the tensor).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Mapping, Optional

import torch

from sporch.orchestrator.models.checkpoint_files import CheckpointError, CheckpointFiles, open_checkpoint
from sporch.orchestrator.models.checkpoint_format import CheckpointFormat, checkpoint_format

from sporch.runtime.models.finite import nonfinite_weight
from sporch.runtime.models.shards import local_rows
from sporch.runtime.models.mapped import MappedCheckpoint
from sporch.runtime.models.original import RowSource, row_sources

__all__ = ["open_weights", "fill_parameters", "finite"]


def open_weights(path: str | Path, config: Optional[Mapping[str, Any]] = None) -> tuple[CheckpointFiles, CheckpointFormat]:
    """(the checked files, their format and diffusers config) of the checkpoint at ``path``;
    ``config``: the diffusers config already decided (the plan's), for a checkpoint without its own."""
    ckpt = open_checkpoint(path)
    return ckpt, checkpoint_format(ckpt, config)


def _first(names: list[str]) -> str:
    more = f" and {len(names) - 1} more" if len(names) > 1 else ""
    return f"{names[0]!r}{more}"


def _check_names(own: Mapping[str, torch.Tensor], sources: Mapping[str, RowSource], where: str, fmt: CheckpointFormat) -> None:
    missing = sorted(set(own) - set(sources))
    if missing:
        raise CheckpointError(f"{where} ({fmt.describe()}) lacks tensor {_first(missing)} of {fmt.class_name}; the "
                              "checkpoint is incomplete or of another model variant")
    unexpected = sorted(set(sources) - set(own))
    if unexpected:
        raise CheckpointError(f"{where} ({fmt.describe()}) has unexpected tensor {_first(unexpected)} for "
                              f"{fmt.class_name}; the checkpoint is of another model variant or size")


def _nonfinite(where: str, src: str, name: str, value: torch.Tensor, dtype: torch.dtype) -> CheckpointError:
    bad = nonfinite_weight(value)
    named = f"tensor {src!r}" + (f" ({name})" if name != src else "")  # an original release names it otherwise
    if bad:
        return CheckpointError(f"{where}: {named}: {bad}; the checkpoint is corrupt (download or convert it again)")
    return CheckpointError(f"{where}: {named} overflows {str(dtype).removeprefix('torch.')} "
                           f"({nonfinite_weight(value.to(dtype))}); run in a wider workload.dtype")


@torch.no_grad()
def fill_parameters(model: torch.nn.Module, ckpt: CheckpointFiles, fmt: CheckpointFormat) -> torch.nn.Module:
    """Copy every parameter's rows (this rank's, for a sharded one) from ``ckpt`` into ``model``
    (its parameters allocated: ``to_empty``); see the module docstring."""
    where = ckpt.describe()
    shapes = {name: info.shape for name, info in ckpt.tensors.items()}
    try:
        sources = row_sources(fmt, shapes)
    except CheckpointError as exc:
        raise CheckpointError(f"{where}: {exc}") from None
    own = model.state_dict()
    _check_names(own, sources, where, fmt)
    for name, param in own.items():
        src = sources[name]
        if src.shape != tuple(param.shape):
            theirs = " + ".join(f"{run.tensor} {list(shapes[run.tensor])}" for run in src.runs[:4])
            raise CheckpointError(f"{where}: {name} of {fmt.class_name} needs {list(param.shape)}, but the checkpoint "
                                  f"gives {list(src.shape)} ({theirs}); the checkpoint is of another model size")
    with MappedCheckpoint(ckpt) as mapped:
        for name, param in own.items():
            _copy_rows(mapped, sources[name], param, name, where)
    return model


def finite(t: torch.Tensor) -> bool:
    """Whether every value of ``t`` is finite, from one reduction and no temporary: its smallest and
    largest values (``aminmax``: NaN anywhere makes both NaN, an inf is one of them); some 30 times
    faster than counting (``finite.nonfinite_weight``), which is left for the message."""
    if not t.is_floating_point() or t.numel() == 0:
        return True
    try:
        lo, hi = torch.aminmax(t)
    except (RuntimeError, TypeError, NotImplementedError):  # a dtype aminmax does not take (float8): count
        return not nonfinite_weight(t)
    return bool(torch.isfinite(lo)) and bool(torch.isfinite(hi))


def _copy_rows(mapped: MappedCheckpoint, src: RowSource, param: torch.Tensor, name: str, where: str) -> None:
    local, rows = local_rows(param)
    if src.scalar:
        value = mapped.tensor(src.runs[0].tensor)
        local.copy_(value.reshape(local.shape))
        if not finite(local):
            raise _nonfinite(where, src.runs[0].tensor, name, value, local.dtype)
        return
    start, stop = (0, src.rows) if rows is None else (rows.start, rows.stop)
    at = 0
    for run in src.runs_for(start, stop):
        n = run.stop - run.start
        view = mapped.tensor(run.tensor)[run.start:run.stop]
        part = local[at:at + n]
        try:
            part.copy_(view)
        except Exception as exc:  # noqa: BLE001 - a read error of the mapped file (a file cut short since)
            raise CheckpointError(f"{where}: cannot read tensor {run.tensor!r} ({exc})".splitlines()[0]) from None
        if not finite(part):  # checked as it is read; the file's values tell corrupt from overflow
            raise _nonfinite(where, run.tensor, name, view, local.dtype)
        at += n
