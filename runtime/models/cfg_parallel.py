"""CFG parallelism on the one model path: one transformer call on the two CFG passes' batch, each
half computed on its own cfg rank.

A call whose batch holds both classifier-free-guidance passes (2 x B rows: the first half one
pass, the second the other) is split over ``ctx``'s cfg group: cfg rank ``r`` keeps rows
``r * B .. (r + 1) * B`` of every per-sample argument (the family module's ``BATCHED``: latents,
text states, pooled embeddings, timestep, masks, guidance), runs the transformer on them (on its
sequence group, where :class:`~.sequence_parallel.SequenceParallel` is attached), and the two
outputs are all-gathered over the cfg group in cfg-rank order, so every rank returns the whole
batch's output, in the rows of the call's input.

* :func:`keep_half` / :func:`gather_halves`: the two steps, for a caller that calls the model itself
  (:class:`~.runner.ShardedTransformer`, verify and benchmark);
* :class:`CfgParallel`: the same two steps as torch forward hooks on the model
  (``with CfgParallel(model, ctx, batched):``), for a caller that does not: a diffusers pipeline
  that batches both passes into one transformer call (SD3, CogVideoX, LTX-Video: ``[uncond, cond]``),
  whose code stays as it is (generate, runtime/pipelines/generate_run.py). Every rank still
  sees the whole noise prediction, so every rank's scheduler steps identically. Enter it inside
  ``SequenceParallel`` (its pre-hook is prepended, so the rows are cut before the sequence is; its
  forward hook is appended, so the output is gathered over the cfg group after the sequence's
  gathers).
"""

from __future__ import annotations

import inspect
from typing import Any, Mapping, Sequence

import torch
import torch.distributed as dist

from sporch.runtime.parallel import ParallelContext

__all__ = ["CfgParallel", "by_name", "gather_entries", "gather_halves", "keep_half"]


def _rows(value: Any) -> int | None:
    """The batch rows of a per-sample argument (a tensor's first dim, a list's length), None if none."""
    if torch.is_tensor(value):
        return int(value.shape[0]) if value.dim() else None
    if isinstance(value, (list, tuple)):
        return len(value)
    return None


def keep_half(kwargs: Mapping[str, Any], batched: Sequence[str], ctx: ParallelContext) -> dict[str, Any]:
    """``kwargs`` with each of ``batched`` given (not None) cut to this cfg rank's half of the
    batch (``hidden_states``' rows, else the first batched argument's: Z-Image's ``x``, a list; a
    mapping argument: each of its entries); the rest as they are. Raises ValueError for an odd batch
    or a batched argument of another row count (the call is not two CFG passes of one batch)."""
    first = "hidden_states" if "hidden_states" in kwargs or not batched else batched[0]
    batch = _rows(kwargs.get(first))
    if batch is None or batch % 2 or not batched:
        raise ValueError(f"CFG parallel needs a call whose batch holds both CFG passes (an even number of "
                         f"{first} rows) and the family's batched arguments; got batch {batch}")
    half, me = batch // 2, ctx.cfg_rank

    def cut(name: str, value: Any) -> Any:
        if value is None:
            return None
        if isinstance(value, Mapping):  # a dict of per-sample conditions (PixArt's added_cond_kwargs)
            return {k: cut(f"{name}[{k!r}]", v) for k, v in value.items()}
        rows = _rows(value)
        if rows != batch:
            raise ValueError(f"CFG parallel: {name} has {rows} rows, not the batch's {batch}; cannot split it "
                             "over the cfg ranks")
        return value[me * half:(me + 1) * half]

    out = dict(kwargs)
    for name in batched:
        if kwargs.get(name) is not None:
            out[name] = cut(name, kwargs[name])
    return out


def by_name(module: torch.nn.Module, args: Sequence[Any], kwargs: Mapping[str, Any]) -> dict[str, Any]:
    """A call's arguments, each by its name in ``module.forward``'s signature (a pipeline that passes
    the latents positionally, as PixArt's and other older diffusers pipelines do, is split like one
    that names them); ValueError for more positional arguments than the signature names."""
    if not args:
        return dict(kwargs)
    names = [n for n, p in inspect.signature(module.forward).parameters.items()
             if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    if len(args) > len(names):
        raise ValueError(f"CFG parallel: {type(module).__name__} was called with {len(args)} positional arguments; "
                         f"its forward names {len(names)}")
    return {**dict(zip(names, args)), **kwargs}


def gather_halves(out: torch.Tensor, ctx: ParallelContext) -> torch.Tensor:
    """This cfg rank's output rows and the other's, concatenated in cfg-rank order (the input's rows)."""
    out = out.contiguous()
    parts = [torch.empty_like(out) for _ in range(ctx.cfg)]
    with ctx.guard(), ctx.collective("cfg_gather", "cfg", kind="all_gather"):
        dist.all_gather(parts, out, group=ctx.cfg_group)
    return torch.cat(parts, dim=0)


def _tensor_list(value: Any) -> bool:
    return isinstance(value, (list, tuple)) and bool(value) and all(torch.is_tensor(v) for v in value)


def gather_entries(entries: Sequence[torch.Tensor], ctx: ParallelContext) -> list[torch.Tensor]:
    """A prediction given as one tensor per sample (Z-Image's list of latents): this cfg rank's entries
    and the other's, in cfg-rank order; ValueError, one line, for entries of unequal shapes."""
    shapes = {tuple(e.shape) for e in entries}
    if len(shapes) != 1:
        raise ValueError(f"CFG parallel: the call's per-sample outputs have unequal shapes {sorted(shapes)}; "
                         "cannot gather them over the cfg ranks")
    return list(gather_halves(torch.stack(list(entries)), ctx).unbind(0))


class CfgParallel:
    """Torch forward hooks on ``model`` (the transformer) while entered: its calls (by keyword, or
    positionally: :func:`by_name` names them) take this cfg rank's half of ``batched``
    (:func:`keep_half`) and return the whole batch's output (:func:`gather_halves` on each tensor
    of a tuple output or of diffusers' output record: a second stream's prediction too, LTX-2's
    audio; a list of per-sample tensors in a tuple output, Z-Image's: :func:`gather_entries`)."""

    def __init__(self, model: torch.nn.Module, ctx: ParallelContext, batched: Sequence[str]) -> None:
        if ctx.cfg != 2:
            raise ValueError(f"CfgParallel splits the two CFG passes over a cfg group of 2; this context has cfg "
                             f"{ctx.cfg}")
        self.model, self.ctx, self.batched = model, ctx, tuple(batched)
        self._handles: list[Any] = []

    def __enter__(self) -> "CfgParallel":
        self._handles = [self.model.register_forward_pre_hook(self._split, with_kwargs=True, prepend=True),
                         self.model.register_forward_hook(self._gather)]
        return self

    def __exit__(self, *exc) -> None:
        for handle in self._handles:
            handle.remove()
        self._handles = []

    def _split(self, module, args, kwargs):
        return (), keep_half(by_name(module, args, kwargs), self.batched, self.ctx)

    def _gather(self, module, args, output):
        if isinstance(output, (tuple, list)):  # every prediction of the call (LTX-2: video, then audio)
            return type(output)(gather_halves(t, self.ctx) if torch.is_tensor(t)
                                else gather_entries(t, self.ctx) if _tensor_list(t) else t for t in output)
        if hasattr(output, "sample"):
            for name, value in list(output.items()):  # diffusers' output record: each of its tensors
                if torch.is_tensor(value):
                    output[name] = gather_halves(value, self.ctx)
            return output
        return gather_halves(output, self.ctx)
