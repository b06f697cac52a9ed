"""A split plan derived from traces of a tiny instance of a diffusers transformer class.

For a class with neither diffusers' ``_cp_plan`` nor a table its family ships, the plan
(``models/families/plan_format.py``) is read off three unsharded forwards of the class built
from its family's tiny config (``trace.py``): two with different image and text token counts
(A and B: a dimension that is the image's token count in both is an image-token dimension,
the text's count plus a constant in both a text-token one, their sum plus a constant a joint
[image + text] one) and A again with noise added to the output of the first block of the block
stack (what a later argument depends on). From them:

* **the block stack**: the first top-level ``ModuleList`` whose first block takes image (or
  joint) tokens, and every block list called after it; every attention outside those lists
  runs before the first split, i.e. local, on whole tensors (a text refiner);
* **the streams**, split at the stack's first block: its token arguments that no later block
  takes again (``hidden_states``; ``encoder_hidden_states`` when a block returns text tokens,
  i.e. the text is a joint stream; a text only attended to stays whole on every rank);
* **the other token inputs** of the stack's blocks (RoPE tables, masks, per-token modulation):
  those that do not depend on the first block's output, split at every block of their list
  (``"list.*"``), or where the module that makes them returns them (``split_output``) when only
  the stack takes them and no attention runs between; a joint [image, text] one is cut as
  ``segments`` of the two streams, in the order the forward concatenates them (``torch.cat`` of
  an image and a text tensor, as its attention does);
* **the gather**: the output of the last module after the stack whose output depends on the
  stack (``proj_out``), or earlier ones.

Several plans can fit the evidence (a producer's split or every block's, the gather point, an
unobserved segment order): :func:`derive` returns them in order of preference, each checked by a
single-process dry run (``dry_run.py``: the real hooks on virtual ranks, attention local); the
gloo check (``verdict.py``) takes the first that is exact.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any, Callable, Mapping, Optional

import torch

from sporch.orchestrator.models.families.plan_format import GatherOutput, SplitInput, SplitPlan, splits_text

from sporch.runtime.models.build import random_class
from sporch.runtime.models.dry_run import dry_run
from sporch.runtime.models.trace import Call, Trace, block_lists, tensors_in, trace

__all__ = ["DeriveSpec", "Candidate", "Derivation", "derive", "analyse"]

#: the token grids and text lengths of the two traces (image: f x h x w tokens): uneven over 2 and
#: 4 ranks, and the image, text and joint counts all different within each trace
IMAGE_GRIDS = ((1, 3, 5), (1, 5, 7))
VIDEO_GRIDS = ((3, 1, 5), (5, 1, 7))
TEXT_LENS = (6, 10)


@dataclass(frozen=True)
class DeriveSpec:
    """How to build the tiny instance and its inputs: the diffusers ``class_name``, its tiny
    ``config``, the family's ``inputs(config, *, batch, grid, text_len, generator)`` (a module-level
    function: the gloo check pickles it), two token ``grids`` and ``text_lens`` (A, B)."""

    class_name: str
    config: Mapping[str, Any]
    inputs: Callable[..., dict]
    grids: tuple = IMAGE_GRIDS
    text_lens: tuple = TEXT_LENS
    batch: int = 2
    seed: int = 3

    def model(self) -> torch.nn.Module:
        return random_class(self.class_name, dict(self.config), seed=self.seed)

    def tokens(self, which: int) -> tuple[int, int]:
        f, h, w = self.grids[which]
        return f * h * w, self.text_lens[which]

    def make_inputs(self, which: int) -> dict:
        """The forward's inputs for trace ``which`` (0: A, 1: B); a text mask (an input named
        ``*mask*`` of shape [batch, text]) drops the last text token of the first row, so a joint
        mask built from it shows where the text sits (and the check covers dropped keys)."""
        kw = self.inputs(dict(self.config), batch=self.batch, grid=self.grids[which],
                         text_len=self.text_lens[which], generator=torch.Generator().manual_seed(5 + which))
        text = self.text_lens[which]
        for name, v in kw.items():
            if "mask" in name and torch.is_tensor(v) and tuple(v.shape) == (self.batch, text):
                v = v.clone()
                v[0, -1] = 0
                kw[name] = v
        return kw


@dataclass(frozen=True)
class Candidate:
    """A plan that fits the traces, and how it was chosen (one line)."""

    plan: SplitPlan
    note: str


@dataclass
class Derivation:
    """The candidates in order of preference (dry-run checked by :func:`derive`), or the
    ``problems`` that left none; ``stack``: the block lists the plan cuts."""

    class_name: str
    candidates: list[Candidate] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)
    stack: tuple[str, ...] = ()


def derive(spec: DeriveSpec) -> Derivation:
    """The candidate plans of ``spec``'s class, each passing the dry run (``dry_run.py``)."""
    model = spec.model()
    a_in, b_in = spec.make_inputs(0), spec.make_inputs(1)
    (sa, ta), (sb, tb) = spec.tokens(0), spec.tokens(1)
    a = trace(model, a_in, image=sa, text=ta)
    b = trace(model, b_in, image=sb, text=tb)
    result = Derivation(spec.class_name)
    for start in _starts(model, a, b):
        perturbed = trace(model, a_in, image=sa, text=ta, perturb=f"{start}.0")
        found = analyse(a, b, perturbed, start, block_lists(model))
        if not found.candidates:
            result.problems += [f"stack at {start}: {p}" for p in found.problems]
            continue
        for cand in found.candidates:
            failure = dry_run(model, a_in, cand.plan, a)
            if failure is None:
                result.candidates.append(cand)
            else:
                result.problems.append(f"stack at {start}, {cand.note}: {failure}")
        if result.candidates:
            result.stack = found.stack
            break
    if not result.candidates and not result.problems:
        result.problems.append("no block list (a top-level ModuleList) takes a tensor as long as the image's tokens "
                               "(f x h x w) or the image's and the text's together")
    return result


# -- the evidence -------------------------------------------------------------------------------
def _kind(na: int, nb: int, a: Trace, b: Trace) -> Optional[str]:
    if na == a.image and nb == b.image:
        return "image"
    joint_a, joint_b = a.image + a.text, b.image + b.text
    if na >= joint_a and na - joint_a == nb - joint_b:
        return "joint"
    if na >= a.text and na - a.text == nb - b.text:
        return "text"
    return None


def _token_dims(x: torch.Tensor, y: torch.Tensor, a: Trace, b: Trace) -> list[tuple[int, str]]:
    """(dim, kind) of every token dimension of ``x`` (trace A) / ``y`` (the same tensor in B)."""
    if x.dim() != y.dim():
        return []
    return [(d, k) for d in range(x.dim()) if (k := _kind(x.shape[d], y.shape[d], a, b)) is not None]


def _pairs(a: Trace, other: Trace) -> dict[int, Call]:
    """A's call order -> the same call (name and occurrence) in ``other``."""
    seen: dict[str, int] = {}
    mine = {}
    for c in a.calls:
        k = seen.get(c.name, 0)
        seen[c.name] = k + 1
        mine[(c.name, k)] = c.order
    seen = {}
    out = {}
    for c in other.calls:
        k = seen.get(c.name, 0)
        seen[c.name] = k + 1
        if (c.name, k) in mine:
            out[mine[(c.name, k)]] = c
    return out


def _starts(model, a: Trace, b: Trace) -> list[str]:
    """Block lists, in call order, whose first block takes image or joint tokens."""
    pairs = _pairs(a, b)
    out = []
    for name in block_lists(model):
        first = next((c for c in a.calls if c.name == f"{name}.0"), None)
        if first is None or first.order not in pairs:
            continue
        other = pairs[first.order]
        for arg, value in first.args.items():
            twin = dict(tensors_in(other.args.get(arg)))
            if any(k in ("image", "joint") for path, t in tensors_in(value) if path in twin
                   for _, k in _token_dims(t, twin[path], a, b)):
                out.append((first.order, name))
                break
    return [n for _, n in sorted(out)]


@dataclass
class _Slot:
    """A token-carrying argument of a stack block (or an element of a tuple argument)."""

    call: Call
    arg: str
    path: tuple
    tensor: torch.Tensor
    dim: int
    kind: str
    derived: bool  # depends on the stack's first output


def analyse(a: Trace, b: Trace, perturbed: Trace, start: str, lists: list[str]) -> Derivation:
    """The candidate plans for the stack starting at block list ``start`` (no dry run)."""
    out = Derivation("")
    pairs, noisy = _pairs(a, b), _pairs(a, perturbed)
    first = next(c for c in a.calls if c.name == f"{start}.0")
    stack_lists = {c.block_list for c in a.calls if c.block_list in lists and c.order >= first.order}
    stack = [c for c in a.calls if c.block_list in stack_lists and c.order >= first.order]
    out.stack = tuple(sorted(stack_lists, key=lambda n: next(c.order for c in stack if c.block_list == n)))
    slots, problems = _slots(stack, first, pairs, noisy, a, b)
    text_split = any(k == "text" for c in stack if c.order in pairs
                     for k in _output_kinds(c, pairs[c.order], a, b)) or any(s.kind == "joint" for s in slots
                                                                           if s.call is first)
    ids_later = {id(s.tensor) for s in slots if s.call is not first}
    streams = [s for s in slots if s.call is first and id(s.tensor) not in ids_later
               and (s.kind != "text" or text_split)]
    image_stream = next((s.arg for s in streams if s.kind == "image" and not s.path), None)
    text_stream = next((s.arg for s in streams if s.kind == "text" and not s.path), None)
    if image_stream is None and not any(s.kind == "joint" for s in streams):
        problems.append(f"its first block {first.name} takes no image-token stream")
    stream_slots = {id(s) for s in streams}
    constants = [s for s in slots if not s.derived and id(s) not in stream_slots and (s.kind != "text" or text_split)]
    if problems:
        out.problems = problems
        return out
    orders = _segment_orders(a, image_stream, text_stream, constants)
    if orders is None:
        out.problems.append("a joint [image, text] input, but the text is not a stream the stack cuts")
        return out
    gathers = _gathers(a, stack, pairs, noisy, b, text_split)
    producers = _producers(a, stack, first, constants, stack_lists)
    for use_producers in ([True, False] if producers else [False]):
        for order in orders:
            for gather_name, gather in gathers:
                plan, notes = _assemble(streams, constants, first, start, order, producers if use_producers else {},
                                        gather_name, gather, text_split)
                out.candidates.append(Candidate(plan, notes))
    return out


def _slots(stack: list[Call], first: Call, pairs, noisy, a: Trace, b: Trace) -> tuple[list[_Slot], list[str]]:
    slots, problems = [], []
    for c in stack:
        if c.order not in pairs or c.order not in noisy:
            problems.append(f"{c.name} is called a different number of times for other token counts")
            continue
        for arg, value in c.args.items():
            twin = dict(tensors_in(pairs[c.order].args.get(arg)))
            shaken = dict(tensors_in(noisy[c.order].args.get(arg)))
            for path, t in tensors_in(value):
                if path not in twin:
                    continue
                dims = _token_dims(t, twin[path], a, b)
                if len(dims) > 1:
                    problems.append(f"{c.name}'s {arg} has token dimensions {[d for d, _ in dims]} (a mask over "
                                    "pairs of tokens): sequence-parallel attention takes masks that drop keys only")
                    continue
                if dims:
                    derived = c is not first and not torch.equal(t, shaken.get(path, t))
                    slots.append(_Slot(c, arg, path, t, dims[0][0], dims[0][1], derived))
    return slots, problems


def _output_kinds(c: Call, twin: Call, a: Trace, b: Trace) -> set[str]:
    other = dict(tensors_in(twin.output))
    return {k for path, t in tensors_in(c.output) if path in other for _, k in _token_dims(t, other[path], a, b)}


def _segment_orders(a: Trace, image: Optional[str], text: Optional[str], constants: list[_Slot]):
    """The orders in which a joint input's segments are cut: [(image, text)] or [(text, image)] as
    the forward concatenates them, both (in the likelier order first) when it never did, [()]
    when no input is joint or the stack's stream itself is joint; None: joint with no text stream."""
    if not any(s.kind == "joint" for s in constants) or image is None:
        return [()]
    if text is None:
        return None
    seen = {o for o in a.cats}
    names = {"image": image, "text": text}
    if len(seen) == 1:
        (order,) = seen
        return [tuple(names[k] for k in order)]
    return [(text, image), (image, text)]


def _gathers(a: Trace, stack: list[Call], pairs, noisy, b: Trace, text_split: bool):
    """(module name, GatherOutput or a tuple of them) where the stack's tokens may be gathered, the
    latest first: the modules after the stack whose output carries tokens that depend on the stack,
    then the stack's last block."""
    last = stack[-1]
    out = []
    for c in reversed([c for c in a.calls if c.block_list is None and c.order > last.order]):
        spec = _gather_spec(c, pairs, noisy, a, b, text_split, derived_only=True)
        if spec is not None and c.name not in [n for n, _ in out]:
            out.append((c.name, spec))
    spec = _gather_spec(last, pairs, noisy, a, b, text_split, derived_only=False)
    if spec is not None:
        out.append((last.name, spec))
    return out


def _gather_spec(c: Call, pairs, noisy, a, b, text_split: bool, derived_only: bool):
    if c.order not in pairs:
        return None
    twin = dict(tensors_in(pairs[c.order].output))
    shaken = dict(tensors_in(noisy[c.order].output)) if c.order in noisy else {}
    found = {}
    for path, t in tensors_in(c.output):
        if len(path) > 1 or path not in twin:
            continue
        dims = [(d, k) for d, k in _token_dims(t, twin[path], a, b) if k != "text" or text_split]
        if len(dims) == 1 and (not derived_only or not torch.equal(t, shaken.get(path, t))):
            found[path] = GatherOutput(gather_dim=dims[0][0], expected_dims=t.dim())
    if not found or (derived_only and not any(k in ("image", "joint") for p, g in found.items()
                                              for k in [_kind_at(c, p, g, pairs, a, b)])):
        return None
    if () in found:
        return found[()]
    n = len(c.output)
    return tuple(found.get((i,)) for i in range(n))


def _kind_at(c: Call, path, g: GatherOutput, pairs, a, b) -> Optional[str]:
    x = dict(tensors_in(c.output))[path]
    y = dict(tensors_in(pairs[c.order].output))[path]
    return _kind(x.shape[g.gather_dim], y.shape[g.gather_dim], a, b)


def _producers(a: Trace, stack: list[Call], first: Call, constants: list[_Slot], stack_lists) -> dict:
    """(arg, path) -> (module, output index): constants that are one tensor throughout the stack
    and an output element of a top-level module called before it, taken by no other top-level
    module, with no attention outside the stack between that module and the stack."""
    out = {}
    outside_attention = [o for o, name in a.attention if name.split(".")[0] not in stack_lists]
    for (arg, path), group in _by_arg(constants).items():
        ids = {id(s.tensor) for s in group}
        if len(ids) != 1 or group[0].kind == "joint":
            continue
        tid = ids.pop()
        for c in a.calls:
            if c.block_list is not None or c.order >= first.order:
                continue
            where = [p for p, t in tensors_in(c.output) if id(t) == tid]
            if not where or len(where[0]) > 1:
                continue
            index = where[0][0] if where[0] else 0
            taken_elsewhere = any(id(t) == tid for o in a.calls if o.block_list is None and o.order > c.order
                                  for v in o.args.values() for _, t in tensors_in(v))
            between = any(c.order < o < first.order for o in outside_attention)
            if not taken_elsewhere and not between:
                out[(arg, path)] = (c.name, index)
            break
    return out


def _by_arg(slots: list[_Slot]) -> dict:
    groups: dict = {}
    for s in slots:
        groups.setdefault((s.arg, s.path), []).append(s)
    return groups


def _assemble(streams, constants, first: Call, start: str, order: tuple, producers: dict, gather_name: str,
              gather, text_split: bool) -> tuple[SplitPlan, str]:
    """One plan: producers' splits, the streams at the first block, the constants at every block of
    their lists, the gather; in call order."""
    entries: dict[str, dict] = {}
    kinds: dict[tuple, str] = {}
    order_of: dict[str, int] = {}

    def put(module: str, key, spec, kind: str, when: int) -> None:
        entry = entries.setdefault(module, {})
        if isinstance(spec, _Elements) and isinstance(entry.get(key), _Elements):
            spec = _Elements({**entry[key], **spec})
        entry[key] = spec
        kinds[(module, key)] = kind
        order_of.setdefault(module, when)

    for (arg, path), (module, index) in producers.items():
        s = next(x for x in constants if (x.arg, x.path) == (arg, path))
        put(module, index, SplitInput(split_dim=s.dim, expected_dims=s.tensor.dim(), split_output=True), s.kind, -1)
    for s in streams:
        _put_arg(put, f"{start}.0", s, None, first.order)
    for (arg, path), group in _by_arg(constants).items():
        if (arg, path) in producers:
            continue
        for s in group:
            seg = order if s.kind == "joint" else None
            _put_arg(put, f"{s.call.block_list}.*", s, seg, s.call.order)
    plan: dict = {}
    for module in sorted(entries, key=lambda m: order_of[m]):
        plan[module] = {k: _tuple_specs(v) for k, v in entries[module].items()}
    plan[gather_name] = gather
    if text_split and not splits_text(plan):  # a joint stream under another name: mark what carries text
        plan = {m: ({k: _mark_text(v, kinds.get((m, k))) for k, v in e.items()} if isinstance(e, dict) else e)
                for m, e in plan.items()}
    notes = []
    if producers:
        notes.append("split where made: " + ", ".join(sorted({m for m, _ in producers.values()})))
    if order:
        notes.append(f"joint inputs cut as segments {order}")
    notes.append(f"gathered at {gather_name}")
    return plan, "; ".join(notes)


def _put_arg(put, module: str, s: _Slot, segments: Optional[tuple], when: int) -> None:
    spec = SplitInput(split_dim=s.dim, expected_dims=s.tensor.dim(), segments=tuple(segments or ()))
    if not s.path:
        put(module, s.arg, spec, s.kind, when)
    else:  # an element of a tuple argument: collected per element, made a tuple in _tuple_specs
        put(module, s.arg, _Elements.add(s.path[0], spec), s.kind, when)


class _Elements(dict):
    """Per-element specs of a tuple argument while a plan is assembled."""

    @classmethod
    def add(cls, index: int, spec: SplitInput) -> "_Elements":
        return cls({index: spec})


def _tuple_specs(v):
    if isinstance(v, _Elements):
        return tuple(v[i] for i in range(max(v) + 1))
    return v


def _mark_text(spec, kind: Optional[str]):
    if kind not in ("text", "joint"):
        return spec
    if isinstance(spec, tuple):
        return tuple(replace(s, text=True) for s in spec)
    return replace(spec, text=True)
