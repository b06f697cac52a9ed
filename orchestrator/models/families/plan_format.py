"""Where a sequence-parallel transformer splits and gathers its tensors (standard library only).

The records mirror diffusers' ``ContextParallelInput`` / ``ContextParallelOutput`` (the
``_cp_plan`` class attribute of the classes that carry one, diffusers 0.42.1
``models/_modeling_parallel.py``), so one format serves both: the runtime turns a class's own
``_cp_plan`` into these records, and a family ships a table of them for a class without one.

A plan maps a module's name (``""`` the model itself, ``"blocks.0"``, ``"blocks.*"`` every child
of ``blocks``, ``"blocks.*.attn1"`` every block's ``attn1``: a ``*`` part anywhere) to either

* ``{input name or output index: SplitInput}``: split that forward argument before the module
  runs (or, with ``split_output``, that element of its output after it ran); an output index may
  also map to a ``GatherOutput`` (sporch's addition): that element is gathered after the module
  ran, so one entry splits a module's input and gathers its output (Helios' attention and
  feed-forward, split and gathered in every block: diffusers names each block's gather apart); or
* ``GatherOutput`` (or a tuple of them, one per output): gather the output after the module ran.

A tensor whose number of dimensions is not ``expected_dims`` is left whole (as diffusers does:
e.g. Wan's per-token timesteps are split, a timestep per sample is not).

``segments`` (sporch's own addition, not in diffusers): the tensor is, along ``split_dim``, the
concatenation of tokens of the named inputs, each whole (e.g. HunyuanVideo's attention mask over
[video tokens, text tokens], built before the blocks split either): each segment is cut as that
input was (its length recorded when it was split earlier in the forward) and this rank's pieces
are joined in the same order, so the result lines up with the rank's concatenated keys. One segment
may be :data:`OWN` (``"~"``): the rest of the tensor, tokens of this rank's own already (made from
tensors cut earlier, e.g. HiDream's text rows of a RoPE table built after its text projections were
cut), kept as they are.

``text`` (sporch's own): the tensor carries text tokens though it is not named
``encoder_hidden_states`` (a joint [text, image] stream entering the blocks as one
``hidden_states``, its RoPE table and mask): the plan cuts the text with the image's
(:func:`splits_text`). A derived plan (runtime/models/derive.py) sets it only where no
``encoder_hidden_states`` is split, so plans that name their text stream compare equal whatever
made them.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Mapping, Optional, Tuple, Union


#: a ``segments`` name: the rest of the tensor, already this rank's own tokens (kept, not cut again)
OWN = "~"


@dataclass(frozen=True)
class SplitInput:
    split_dim: int
    expected_dims: Optional[int] = None
    split_output: bool = False
    segments: Tuple[str, ...] = ()
    text: bool = False


@dataclass(frozen=True)
class GatherOutput:
    gather_dim: int
    expected_dims: Optional[int] = None


Entry = Union[Mapping[Union[str, int], SplitInput], GatherOutput, Tuple[GatherOutput, ...]]
#: module name -> what happens at it
SplitPlan = Mapping[str, Entry]


def splits_text(plan: SplitPlan) -> bool:
    """True when the plan splits ``encoder_hidden_states`` or a tensor marked ``text`` (text tokens
    are sharded like the image's, so attention to them is sequence-parallel; else they stay whole
    on every rank)."""
    def marked(spec) -> bool:
        specs = spec if isinstance(spec, tuple) else (spec,)
        return any(isinstance(s, SplitInput) and s.text for s in specs)

    return any(isinstance(e, Mapping) and ("encoder_hidden_states" in e or any(marked(s) for s in e.values()))
               for e in plan.values())


def entries(plan: SplitPlan) -> list[str]:
    """One line per entry, with the dimensions: ``split layers.*: attention_mask (dim 1 of 2),
    image_rotary_emb (dim 1 of 3)``; ``gather proj_out (dim 1 of 3)``."""
    def spec(s) -> str:
        if isinstance(s, tuple):
            return "(" + ", ".join(spec(x) for x in s) + ")"
        if s is None:
            return "-"
        dim = s.split_dim if isinstance(s, SplitInput) else s.gather_dim
        out = f"dim {dim}" + (f" of {s.expected_dims}" if s.expected_dims is not None else "")
        if isinstance(s, SplitInput) and s.segments:
            out += " as segments " + " + ".join(s.segments)
        return out

    lines = []
    for name, entry in plan.items():
        where = name or "(model)"
        if isinstance(entry, Mapping):
            outputs = all(isinstance(s, SplitInput) and s.split_output for s in entry.values())
            parts = ", ".join(f"{'output ' if isinstance(k, int) else ''}{k} ({spec(v)})" for k, v in entry.items())
            lines.append(f"split {where}{' as it returns' if outputs else ''}: {parts}")
        else:
            lines.append(f"gather {where} ({spec(entry)})")
    return lines


def describe(plan: SplitPlan) -> str:
    """One line: where the plan splits and gathers."""
    parts = []
    for name, entry in plan.items():
        where = name or "(model)"
        if isinstance(entry, Mapping):
            split = [str(k) for k, v in entry.items() if not isinstance(v, GatherOutput)]
            parts.append(f"split {where}: " + ", ".join(split)
                         + ("; gather its output" if len(split) < len(entry) else ""))
        else:
            parts.append(f"gather {where}")
    return "; ".join(parts)


def to_json(plan: SplitPlan) -> list:
    """The plan as JSON values, in its order (a cached derived plan, ``derived_plans.py``): one
    ``{"module", "split": [[key, spec or [specs]], ...]}`` or ``{"module", "gather": spec or [specs]}``
    per entry (keys keep their type: an output index is a number, an input a string; a split
    entry's output index may name a gather, as Helios's per-module plan does)."""
    def spec(s):
        if s is None:
            return None
        if isinstance(s, tuple):
            return [spec(x) for x in s]
        d = {k: v for k, v in vars(s).items()}
        if isinstance(s, SplitInput):
            d["segments"] = list(s.segments)
        return d

    out = []
    for module, entry in plan.items():
        if isinstance(entry, Mapping):
            out.append({"module": module, "split": [[k, spec(v)] for k, v in entry.items()]})
        else:
            out.append({"module": module, "gather": spec(entry)})
    return out


def from_json(data: list) -> SplitPlan:
    """:func:`to_json`'s inverse; ValueError (one line) for anything else."""
    def split(d):
        if isinstance(d, list):
            return tuple(split(x) for x in d)
        if "gather_dim" in d:  # an output index gathered in a split entry (split on entry, gathered on exit)
            return gather(d)
        return SplitInput(split_dim=int(d["split_dim"]), expected_dims=d.get("expected_dims"),
                          split_output=bool(d.get("split_output", False)), segments=tuple(d.get("segments", ())),
                          text=bool(d.get("text", False)))

    def gather(d):
        if d is None:
            return None
        if isinstance(d, list):
            return tuple(gather(x) for x in d)
        return GatherOutput(gather_dim=int(d["gather_dim"]), expected_dims=d.get("expected_dims"))

    plan: dict = {}
    try:
        for entry in data:
            if "split" in entry:
                plan[str(entry["module"])] = {(k if isinstance(k, int) else str(k)): split(v) for k, v in entry["split"]}
            else:
                plan[str(entry["module"])] = gather(entry["gather"])
    except (KeyError, TypeError, ValueError, AttributeError) as exc:
        raise ValueError(f"not a split plan: {type(exc).__name__} {exc}") from None
    return plan
