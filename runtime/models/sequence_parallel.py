"""A diffusers transformer run sequence-parallel over a ParallelContext, its code unchanged.

:class:`SequenceParallel` attaches to a model (``with SequenceParallel(model, ctx, plan):``)

* torch forward hooks where the split plan (``models/families/plan_format.py``: the class's
  own ``_cp_plan`` or the family's shipped table) says: inputs / outputs split with
  :func:`split.split_local` (uneven chunks, no padding), outputs gathered with
  :func:`split.gather_uneven`;
* on every attention module (diffusers' ``Attention`` / ``AttentionModuleMixin``) a forward pre-hook that
  routes the attention the module's processor dispatches (diffusers' ``native`` backend, set with
  ``model.set_attention_backend``) to sporch's :func:`usp_attention`, through a
  ``TorchFunctionMode`` entered for that module's forward only: Ulysses x ring, uneven heads,
  GQA, and chunks of uneven length padded and masked (``usp_attention(key_mask=)``), with the
  model's own attention mask where it drops keys (a short prompt's padded text tokens): the
  ranks' key masks are gathered so each ring block drops the right keys (``key_keep``).

The head split and the sequence cut are the Plan's record where the context has a Plan
(``ctx.plan``): the query heads per Ulysses rank are ``plan.heads.q_heads_per_rank``, passed to
``usp_attention(head_counts=)`` (an attention whose head count the record does not describe is
refused in one line), and ``plan.sequence`` is checked against this run's cut
(:func:`split.check_recorded_split`). A context without a Plan (tests, tools) splits by the
contract's rules (``contract.parallel``).

Which attention calls are sequence-parallel: those of modules inside the split region (after
the first split of a forward, before its gather), except where the module attends to text that
stays whole on every rank (a cross-attention, ``encoder_hidden_states`` given, when the plan does
not split the text) and modules under the family's ``local_attention`` prefixes (e.g. a text
refiner that runs on the whole prompt; shell-style patterns, ``transformer_blocks.*.audio_attn1``:
every block's, for a stream kept whole on every rank such as LTX-2's audio). Those run plain local
attention.

The hooks are registered on the model once (the first time a ``SequenceParallel`` is entered on
it) and stay for the model's lifetime; each calls the ``SequenceParallel`` entered now and does
nothing while none is, so leaving the ``with`` leaves the model running as diffusers ships it.
Keeping them is what lets compiled blocks compile once: Dynamo guards on the ids of the hooks a
block's call runs, and hooks registered anew for each forward failed those guards every forward
(PixArt's blocks hit the recompile limit and ran eager). :meth:`SequenceParallel.remove` takes
them off. One ``SequenceParallel`` is entered on a model at a time.
"""

from __future__ import annotations

import inspect
import weakref
from fnmatch import fnmatchcase
from dataclasses import dataclass, field
from typing import Any, Mapping

import torch
import torch.nn.functional as F
from torch.overrides import TorchFunctionMode

from sporch.orchestrator.models.families.plan_format import OWN, GatherOutput, SplitInput, SplitPlan, splits_text
from sporch.runtime import faults
from sporch.runtime.attention import usp_attention
from sporch.runtime.parallel import ParallelContext

from sporch.runtime.models.split_plans import diffusers_type
from sporch.runtime.models.sequence_split import all_lengths, check_recorded_split, chunk_sizes, gather_uneven, split_local

__all__ = ["SequenceParallel", "modules_named", "is_attention"]


def modules_named(model: torch.nn.Module, name: str) -> list[torch.nn.Module]:
    """The module ``name`` of ``model`` (``""``: the model); a ``*`` part stands for every child
    there (``blocks.*``: every block; ``blocks.*.attn1``: every block's ``attn1``)."""
    found = [model]
    for part in name.split(".") if name else ():
        found = [c for m in found for c in (m.children() if part == "*" else (m.get_submodule(part),))]
    return found


@dataclass
class _State:
    """One forward's bookkeeping: inside the split region, and whether every split was even."""

    inside: bool = False
    even: bool = True
    calls: int = 0
    #: input name -> its whole length along the split dim, as it was split (for ``segments``)
    lengths: dict = field(default_factory=dict)


_TENSOR_UNFLATTEN = torch.Tensor.unflatten


class _RouteAttention(TorchFunctionMode):
    """Inside one attention module's forward: ``scaled_dot_product_attention`` -> USP."""

    def __init__(self, sp: "SequenceParallel") -> None:
        super().__init__()
        self.sp = sp

    def __torch_function__(self, func, types, args=(), kwargs=None):
        if func is F.scaled_dot_product_attention:
            return self.sp.attention(*args, **(kwargs or {}))
        # the same op: torch.Tensor.unflatten is Python that calls super().unflatten(), which Dynamo cannot
        # trace under a mode (a graph break in every compiled processor that unflattens heads: LTX, Qwen-Image)
        return (torch.unflatten if func is _TENSOR_UNFLATTEN else func)(*args, **(kwargs or {}))


class SequenceParallel:
    """Hooks that make ``model`` sequence-parallel over ``ctx``'s sequence group (see the module
    docstring). ``plan``: the split plan; ``local_attention``: module-name prefixes (or shell-style
    patterns, ``*`` for any block) whose attention runs whole; ``backend``: sporch's attention kernel name. Enter it for the forwards
    that run sharded; an instance may be entered again for each forward (the runner does so)."""

    def __init__(self, model: torch.nn.Module, ctx: ParallelContext, plan: SplitPlan, *,
                 local_attention: tuple[str, ...] = (), backend: str = "auto") -> None:
        self.model, self.ctx, self.plan, self.backend = model, ctx, plan, backend
        self.local_attention = tuple(local_attention)
        self.text_split = splits_text(plan)
        self.head_counts = recorded_heads(ctx, plan, diffusers_type(type(model)).__name__)
        self.state = _State()
        self._modes: list = []
        self._hooks: _Hooks | None = None

    # -- attach / detach -------------------------------------------------------------------
    def __enter__(self) -> "SequenceParallel":
        hooks = _Hooks.on(self.model, self.plan, self.local_attention)
        hooks.target, self._hooks = self, hooks
        self._modes = []
        return self

    def __exit__(self, *exc) -> None:
        if self._hooks is not None:
            self._hooks.target = None
            self._hooks = None

    @staticmethod
    def remove(model: torch.nn.Module) -> None:
        """Take the hooks off ``model`` (they stay registered, inert, after a ``with`` ends)."""
        hooks = model.__dict__.pop(_Hooks.ATTRIBUTE, None)
        if hooks is not None:
            hooks.remove()

    # -- hooks -----------------------------------------------------------------------------
    # each takes the arguments its torch hook gets after the module (_Hooks.calling), then its own
    def _reset(self, args) -> None:
        self.state = _State()

    def _split(self, x: Any, spec: SplitInput, name: str | None = None) -> Any:
        if not torch.is_tensor(x) or (spec.expected_dims is not None and x.dim() != spec.expected_dims):
            return x
        if spec.segments:
            return self._split_segments(x, spec)
        self.state.inside = True
        if x.shape[spec.split_dim] % self.ctx.sequence_size:
            self.state.even = False
        if name is not None:
            self.state.lengths[name] = x.shape[spec.split_dim]
        return split_local(x, spec.split_dim, self.ctx)

    def _split_segments(self, x: torch.Tensor, spec: SplitInput) -> torch.Tensor:
        """``x`` along ``split_dim`` = the named inputs' tokens, each whole, one after another:
        cut each as that input was cut and join this rank's pieces (plan_format ``segments``)."""
        dim = spec.split_dim % x.dim()
        missing = [n for n in spec.segments if n != OWN and n not in self.state.lengths]
        if missing or list(spec.segments).count(OWN) > 1:
            raise ValueError(f"split plan: segments {list(spec.segments)} need {missing} split earlier in the forward"
                             if missing else f"split plan: segments {list(spec.segments)} name {OWN!r} twice")
        known = sum(self.state.lengths[n] for n in spec.segments if n != OWN)
        sizes = [self.state.lengths[n] if n != OWN else x.shape[dim] - known for n in spec.segments]
        if sum(sizes) != x.shape[dim] or min(sizes) < 0:
            raise ValueError(f"split plan: a tensor of {x.shape[dim]} tokens along dim {dim} is not the segments "
                             f"{dict(zip(spec.segments, sizes))} (sum {sum(sizes)})")
        pieces = torch.split(x, sizes, dim=dim)
        return torch.cat([p if n == OWN else split_local(p, dim, self.ctx) for n, p in zip(spec.segments, pieces)],
                         dim=dim)

    def _split_inputs(self, args, kwargs, entry, names, params):
        args = list(args)
        for name in names:
            spec = entry[name]
            if name in kwargs:
                kwargs[name] = self._split_value(kwargs[name], spec, name)
            elif name in params and params.index(name) < len(args):
                i = params.index(name)
                args[i] = self._split_value(args[i], spec, name)
        return tuple(args), kwargs

    def _split_value(self, value, spec, name: str | None = None):
        if isinstance(value, (list, tuple)):
            specs = spec if isinstance(spec, (list, tuple)) else [spec] * len(value)
            return type(value)(self._split(v, s) for v, s in zip(value, specs))
        return self._split(value, spec, name)

    def _split_outputs(self, args, output, outs):
        single = torch.is_tensor(output)
        items = [output] if single else list(output)
        for index, spec in outs.items():
            items[index] = self._split(items[index], spec)
        return items[0] if single else type(output)(items)

    def _gather(self, args, output, gathers):
        single = torch.is_tensor(output)
        items = [output] if single else list(output)
        for i, spec in enumerate(gathers):
            if spec is None or not torch.is_tensor(items[i]) or (spec.expected_dims is not None
                                                                 and items[i].dim() != spec.expected_dims):
                continue
            if faults.wrong_shard(self.ctx.rank):  # test hook: this rank's shard wrong (verify must fail)
                items[i] = items[i] + 1
            # every split of this forward even: every rank holds as many tokens as this one (no all-gather of lengths)
            sizes = [items[i].shape[spec.gather_dim]] * self.ctx.sequence_size if self.state.even else None
            items[i] = gather_uneven(items[i], spec.gather_dim, self.ctx, sizes=sizes)
            if faults.swap_shards_set() and faults.swaps_shards(self.ctx.layout.name):
                items[i] = _swap_first_two(items[i], spec.gather_dim, self.ctx)  # test hook: a wrong layout
        self.state.inside = False
        return items[0] if single else type(output)(items)

    def _enter_attention(self, args, kwargs, local: bool) -> None:
        text = kwargs.get("encoder_hidden_states", args[1] if len(args) > 1 else None)
        cross_whole = torch.is_tensor(text) and not self.text_split
        sharded = self.state.inside and not local and not cross_whole
        mode = _RouteAttention(self) if sharded else None
        if mode is not None:
            mode.__enter__()
        self._modes.append(mode)

    def _leave_attention(self, args, output) -> None:
        mode = self._modes.pop()
        if mode is not None:
            mode.__exit__(None, None, None)

    # -- attention -------------------------------------------------------------------------
    @torch.compiler.disable
    def attention(self, query, key, value, attn_mask=None, dropout_p=0.0, is_causal=False, scale=None,
                  enable_gqa=False):
        """``F.scaled_dot_product_attention``'s contract ([B, H, S, D]) over the sequence group:
        each rank holds its chunk of the queries and of the keys/values. ``attn_mask``: a mask
        over this rank's keys that drops some of them (bool: False drops; float: 0 keeps, a large
        negative bias <= ``DROP_BIAS`` drops), the same for every query and head; the ranks'
        masks are gathered (one small all-gather) so each ring block drops the right keys."""
        if is_causal or dropout_p:
            raise NotImplementedError("sequence-parallel attention is non-causal, without dropout")
        ctx = self.ctx
        q, k, v = query.transpose(1, 2), key.transpose(1, 2), value.transpose(1, 2)
        lq, lk = q.shape[1], k.shape[1]
        if self.state.even:
            lens = [[lq, lk]] * ctx.sequence_size
        else:
            lens = all_lengths([lq, lk], ctx)  # one small all-gather: chunks differ in length
        width = max(max(a, b) for a, b in lens)
        q, k, v = (_pad(t, width) for t in (q, k, v))
        key_sizes = [b for _, b in lens]
        masks = [None]
        if attn_mask is not None:
            keep = gather_uneven(key_keep(attn_mask, q.shape[0], lk).to(torch.uint8), 1, ctx, sizes=key_sizes)
            masks = _rank_masks(keep.bool(), key_sizes, width)
        elif any(b != width for b in key_sizes):
            masks = [_rank_masks(torch.ones(1, sum(key_sizes), dtype=torch.bool), key_sizes, width)[0]]
        self.state.calls += 1
        layer = self.state.calls - 1
        stats = getattr(ctx, "comm_stats", None)
        if len(masks) == 1:  # one mask for the whole batch (or none)
            out = usp_attention(q, k, v, ctx, backend=self.backend, scale=scale, key_mask=masks[0], stats=stats,
                                layer=layer, head_counts=self.head_counts)
        else:  # rows that drop different keys: one call per row (every rank loops alike)
            out = torch.cat([usp_attention(q[i:i + 1], k[i:i + 1], v[i:i + 1], ctx, backend=self.backend,
                                           scale=scale, key_mask=m, stats=stats, layer=layer,
                                           head_counts=self.head_counts)
                             for i, m in enumerate(masks)], dim=0)
        return out[:, :lq].transpose(1, 2)


class _Hooks:
    """The torch hooks :class:`SequenceParallel` puts on a model, registered once per model (kept
    in its ``__dict__``) and for the model's lifetime: each calls the ``SequenceParallel``
    entered now (``target``) and does nothing while none is. Registering them anew for each
    forward gave each hook a new id, and a compiled block guards on the ids of the hooks it
    traces (``Module._call_impl`` looks them up), so every forward recompiled until Dynamo's
    recompile limit left the block eager; kept, the blocks compile once."""

    ATTRIBUTE = "_sporch_sequence_parallel_hooks"

    def __init__(self, model: torch.nn.Module, plan: SplitPlan, local_attention: tuple[str, ...]) -> None:
        self.plan, self.local_attention = plan, local_attention
        self.owner = weakref.ref(model)
        self.target: SequenceParallel | None = None
        handles = [model.register_forward_pre_hook(self.calling("_reset"))]
        for name, entry in plan.items():
            for m in modules_named(model, name):
                if isinstance(entry, Mapping):
                    names = [k for k, s in entry.items() if isinstance(k, str) and not _on_output(s)]
                    outs = {k: s for k, s in entry.items() if _on_output(s)}
                    ends = {k: s for k, s in entry.items() if isinstance(k, int) and isinstance(s, GatherOutput)}
                    if names:
                        params = list(inspect.signature(m.forward).parameters)
                        handles.append(m.register_forward_pre_hook(self.calling("_split_inputs", entry, names, params),
                                                                   with_kwargs=True))
                    if outs:
                        handles.append(m.register_forward_hook(self.calling("_split_outputs", outs)))
                    if ends:  # the module's own output gathered after it ran (split on entry, whole on exit)
                        gathers = tuple(ends.get(i) for i in range(max(ends) + 1))
                        handles.append(m.register_forward_hook(self.calling("_gather", gathers)))
                else:
                    gathers = (entry,) if isinstance(entry, GatherOutput) else tuple(entry)
                    handles.append(m.register_forward_hook(self.calling("_gather", gathers)))
        for name, m in model.named_modules():
            if is_attention(m):
                local = any(fnmatchcase(name, p) or fnmatchcase(name, p + ".*") for p in local_attention)
                handles.append(m.register_forward_pre_hook(self.calling("_enter_attention", local), with_kwargs=True))
                handles.append(m.register_forward_hook(self.calling("_leave_attention"), always_call=True))
        self.handles = handles

    @classmethod
    def on(cls, model: torch.nn.Module, plan: SplitPlan, local_attention: tuple[str, ...]) -> "_Hooks":
        """The hooks registered on ``model`` for this plan, free to enter (registered now if there
        are none, or replacing those of another plan); refused while a SequenceParallel is entered."""
        hooks = model.__dict__.get(cls.ATTRIBUTE)
        if hooks is not None and hooks.owner() is not model:  # copied with the model: its hooks call the original's
            raise RuntimeError(f"this {type(model).__name__} is a copy of a model that had sequence-parallel hooks "
                               "(they call the original's): SequenceParallel.remove(original) before copying it")
        if hooks is not None and hooks.target is not None:
            raise RuntimeError(f"{type(model).__name__} is already sequence-parallel (a SequenceParallel is "
                               "entered on it): leave that one first")
        if hooks is not None and (hooks.plan != plan or hooks.local_attention != local_attention):
            hooks.remove()
            hooks = None
        if hooks is None:
            hooks = cls(model, plan, local_attention)
            model.__dict__[cls.ATTRIBUTE] = hooks
        return hooks

    def remove(self) -> None:
        for h in self.handles:
            h.remove()
        self.handles = []

    def calling(self, method: str, *extra):
        """A torch hook that hands its arguments (after the module) and ``extra`` to ``method`` of
        the SequenceParallel entered now (``target``), returning what it returns; None (no change)
        while none is entered."""
        def hook(mod, *args):
            sp = self.target
            return None if sp is None else getattr(sp, method)(*args, *extra)
        return hook


def recorded_heads(ctx: ParallelContext, plan: SplitPlan, class_name: str) -> tuple[int, ...] | None:
    """The query heads per Ulysses rank the context's Plan recorded (``plan.heads``), after checking
    its ``plan.sequence`` against this run (:func:`split.check_recorded_split`); None without a Plan."""
    record = getattr(ctx, "plan", None)
    if record is None:
        return None
    check_recorded_split(record.sequence, plan, class_name, degree=ctx.sequence_size)
    counts = tuple(int(c) for c in record.heads.q_heads_per_rank)
    if len(counts) != ctx.ulysses:
        raise ValueError(f"plan.heads records query heads per Ulysses rank {list(counts)}, but this run has "
                         f"ulysses={ctx.ulysses}: re-plan the job (sporch plan)")
    return counts


#: A float attention mask's value at or below which a key counts as dropped: its softmax weight,
#: exp(bias + score - max), underflows to exactly 0 in float32 (and float64) unless its score beats
#: every kept key's by thousands; diffusers' LTX-Video masks with -10000, others with -inf.
DROP_BIAS = -1e4


def key_keep(mask: torch.Tensor, batch: int, keys: int) -> torch.Tensor:
    """``[B' (1 or batch), keys]`` bool, True where a key is kept, from an SDPA ``attn_mask``
    (broadcastable to [B, H, Sq, Sk]) that only drops keys. A mask over another number of keys
    than this rank holds, one that differs between queries or heads, or a float mask with values
    other than 0 and a drop bias (<= ``DROP_BIAS``) raises NotImplementedError saying which."""
    m = mask.reshape((1,) * (4 - mask.dim()) + tuple(mask.shape)) if mask.dim() < 4 else mask
    if m.dim() != 4 or m.shape[-1] != keys or m.shape[0] not in (1, batch):
        raise NotImplementedError(
            f"sequence-parallel attention got a mask of shape {tuple(mask.shape)} for {keys} local keys: the split "
            "plan must split the mask with the keys it covers (SplitInput on it, or segments for a concatenation)")
    keep = m if m.dtype == torch.bool else m == 0
    row = keep[:, :1, :1, :]
    alike = (keep == row).all()  # the same for every query and head
    if m.dtype == torch.bool:
        only_drops, alike = True, bool(alike)
    else:  # 0 or a drop bias only; one device-to-host copy for both checks (each layer calls this)
        only_drops, alike = torch.stack([(keep | (m <= DROP_BIAS)).all(), alike]).tolist()
    if not only_drops:
        raise NotImplementedError("sequence-parallel attention takes a float mask of 0 (keep) and large negative "
                                  f"values (<= {DROP_BIAS:g}: drop) only, not an additive bias")
    if not alike:
        raise NotImplementedError("sequence-parallel attention takes masks that drop keys for every query and head "
                                  "alike; this one differs between queries or heads")
    return row[:, 0, 0, :]


def _rank_masks(keep: torch.Tensor, sizes: list[int], width: int) -> list[torch.Tensor | None]:
    """The gathered key mask ``[B', sum(sizes)]`` (the ranks' keys in rank order) as
    ``usp_attention``'s ``key_mask`` ``[ranks, width]`` (each rank's chunk padded): one for all
    rows when they agree (None when nothing is dropped), else one per row."""
    keep = keep.cpu()  # once: the comparisons below then copy nothing from the device
    rows = [keep[i] for i in range(keep.shape[0])]
    if all(torch.equal(r, rows[0]) for r in rows[1:]):
        rows = rows[:1]
    out = []
    for r in rows:
        if bool(r.all()) and all(n == width for n in sizes):
            out.append(None)
            continue
        km = torch.zeros(len(sizes), width, dtype=torch.bool)
        for rank, piece in enumerate(torch.split(r, sizes)):
            km[rank, :piece.numel()] = piece
        out.append(km)
    return out


def _swap_first_two(x: torch.Tensor, dim: int, ctx: ParallelContext) -> torch.Tensor:
    """``x`` (gathered along ``dim``) with the first two ranks' chunks swapped: the output of a
    deliberately wrong layout (runtime/faults.py ``swaps_shards``)."""
    sizes = chunk_sizes(x.shape[dim], ctx.sequence_size)
    if len(sizes) < 2:
        return x
    first, second, rest = torch.split(x, [sizes[0], sizes[1], x.shape[dim] - sizes[0] - sizes[1]], dim=dim)
    return torch.cat([second, first, rest], dim=dim)


def _on_output(spec) -> bool:
    """A split of the module's output (an int key, ``split_output``), not of an input; a tuple
    spec (one per element of a tuple input) is an input's."""
    return isinstance(spec, SplitInput) and spec.split_output


def is_attention(m: torch.nn.Module) -> bool:
    """A diffusers attention module: ``attention_processor.Attention`` or an
    ``AttentionModuleMixin`` class, both of which run a swappable ``processor``."""
    from diffusers.models.attention import AttentionModuleMixin
    from diffusers.models.attention_processor import Attention

    return isinstance(m, (Attention, AttentionModuleMixin))


def _pad(t: torch.Tensor, width: int) -> torch.Tensor:
    if t.shape[1] == width:
        return t.contiguous()
    pad = list(t.shape)
    pad[1] = width - t.shape[1]
    return torch.cat([t, t.new_zeros(pad)], dim=1)
