"""Load published checkpoints into sporch models.

``load_checkpoint(model, path)``: finds the files (sporch.orchestrator.models.checkpoint_files),
picks the name table of the model's family (``TABLE`` of sporch.orchestrator.models.wan
or .flux) and the format whose names the checkpoint uses (the original release, diffusers, or
sporch's own names from ``save_safetensors``), checks config.json against the model config,
checks that every tensor is there with the right shape and nothing else is, then copies tensor
by tensor out of memory-mapped files (``safe_open``), applying the table's transforms
(transforms.py): a rank never holds a second full copy of the weights, and ranks of one node
share the page cache. A sharded model (FSDP2, ``parallel.shard_weights``) gets only its rows of
each parameter: read as a slice of the mapped file where the transform keeps rows in place
(copy, conv_as_linear), else one parameter read whole and cut; never the whole model.
"""

from __future__ import annotations

from contextlib import ExitStack
from pathlib import Path

import torch
from torch import nn

from sporch.orchestrator.models.checkpoint_files import CheckpointError, CheckpointFiles, open_checkpoint
from sporch.orchestrator.models import flux, wan
from sporch.orchestrator.models.keymap import Table
from ..finite import nonfinite_weight
from ..shards import local_rows
from .transforms import TRANSFORMS

#: Transforms that keep a tensor's rows where they are: a shard reads only its rows from the file.
ROW_PRESERVING = ("copy", "conv_as_linear")

#: The published family whose checkpoints load into a model of each attention kind.
TABLES: dict[str, Table] = {"cross": wan.TABLE, "joint": flux.TABLE}


def table_for(model: nn.Module) -> Table | None:
    """The name table of a hand-built model's family; None for a model in its own names (a
    diffusers transformer on the generic path: its checkpoint's names are its state dict's)."""
    cfg = getattr(model, "cfg", None)
    return TABLES.get(cfg.attention) if cfg is not None else None


def detect_format(ckpt: CheckpointFiles, own: list[str], table: Table | None) -> tuple[str, dict]:
    """The format whose expected tensor names overlap the checkpoint's most."""
    names = set(ckpt.tensors)
    best = ("sporch", {n: ([n], "copy", "") for n in own})
    best_hits = len(names & set(own))
    for fmt in table.formats if table is not None else []:
        try:
            plan = table.sources(own, fmt)
        except KeyError:
            continue
        hits = len(names & {s for srcs, _, _ in plan.values() for s in srcs})
        if hits > best_hits:
            best, best_hits = (fmt, plan), hits
    if best_hits == 0:
        family = table.model if table is not None else "sporch"
        raise CheckpointError(
            f"{ckpt.describe()} is not a {family} checkpoint: none of its {len(names)} tensor names "
            f"(e.g. {sorted(names)[:1]}) is one the {family} model expects")
    return best


@torch.no_grad()
def load_checkpoint(model: nn.Module, path: str | Path, table: Table | None = None) -> nn.Module:
    """Fill ``model``'s parameters from the checkpoint at ``path`` (cast to each parameter's
    dtype, copied to its device) with the name ``table`` (default: the model family's, see
    :data:`TABLES`). Raises CheckpointError (one line) on any mismatch."""
    from safetensors import safe_open

    ckpt = open_checkpoint(path)
    table = table if table is not None else table_for(model)
    own_state = model.state_dict()
    own = list(own_state)
    fmt, plan = detect_format(ckpt, own, table)
    where = ckpt.describe()
    if table is not None and fmt != "sporch":
        table.check_config(fmt, ckpt.config, model.cfg, where)
    expected = {s for srcs, _, _ in plan.values() for s in srcs}
    missing = [s for s in sorted(expected) if s not in ckpt.tensors]
    if missing:
        more = f" and {len(missing) - 1} more" if len(missing) > 1 else ""
        raise CheckpointError(f"{where} ({fmt} format) lacks tensor {missing[0]!r}{more}; "
                              "the checkpoint is incomplete or of another model variant")
    unexpected = sorted(set(ckpt.tensors) - expected)
    if unexpected:
        more = f" and {len(unexpected) - 1} more" if len(unexpected) > 1 else ""
        raise CheckpointError(f"{where} ({fmt} format) has unexpected tensor {unexpected[0]!r}{more}; "
                              "the checkpoint is of another model variant or size")
    with ExitStack() as stack:
        handles = {f: stack.enter_context(safe_open(str(f), framework="pt", device="cpu")) for f in ckpt.files}
        for name, (srcs, transform, leaf) in plan.items():
            param = own_state[name]
            local, rows = local_rows(param)
            value = _read(handles, ckpt, srcs, transform, leaf, getattr(model, "cfg", None), rows, name, tuple(param.shape), where)
            cast = value.to(local.dtype)
            if nonfinite_weight(cast):  # checked per tensor as it is read
                raise _nonfinite(where, srcs[0], name, value, local.dtype)
            local.copy_(cast)
    return model


def _nonfinite(where: str, src: str, name: str, value: torch.Tensor, dtype: torch.dtype) -> CheckpointError:
    bad = nonfinite_weight(value)
    if bad:
        return CheckpointError(f"{where}: tensor {src!r} ({name}): {bad}; the checkpoint is corrupt (download or "
                               "convert it again)")
    return CheckpointError(f"{where}: tensor {src!r} ({name}) overflows {str(dtype).removeprefix('torch.')} "
                           f"({nonfinite_weight(value.to(dtype))}); run in a wider workload.dtype")


def _read(handles, ckpt, srcs, transform, leaf, cfg, rows, name, shape, where) -> torch.Tensor:
    """Parameter ``name`` (full ``shape``) from its source tensors, or only its ``rows``."""
    def fail(shapes: str) -> CheckpointError:
        return CheckpointError(f"{where}: tensor {srcs[0]!r} has shape {shapes}, but sporch's {name} needs "
                               f"{list(shape)}; the checkpoint is of another model size")

    try:
        if rows is not None and transform in ROW_PRESERVING and len(srcs) == 1:
            part = handles[ckpt.tensors[srcs[0]].file].get_slice(srcs[0])
            src_shape = list(part.get_shape())
            # the transform's own shape rule, run on a shape-only (meta) tensor
            full = TRANSFORMS[transform]([torch.empty(src_shape, device="meta")], cfg, leaf).shape
            if tuple(full) != shape:
                raise fail(str(src_shape))
            return TRANSFORMS[transform]([part[rows.start:rows.stop]], cfg, leaf)
        tensors = [handles[ckpt.tensors[s].file].get_tensor(s) for s in srcs]
    except CheckpointError:
        raise
    except Exception as exc:  # noqa: BLE001 - safetensors raises its own error types
        raise CheckpointError(f"{where}: cannot read tensor {srcs[0]!r} ({exc})".splitlines()[0]) from None
    try:
        value = TRANSFORMS[transform](tensors, cfg, leaf)
    except RuntimeError:
        value = None
    if value is None or tuple(value.shape) != shape:
        raise fail(" + ".join(str(list(t.shape)) for t in tensors))
    return value if rows is None else value[rows]


__all__ = ["CheckpointError", "CheckpointFiles", "TABLES", "load_checkpoint", "open_checkpoint"]
