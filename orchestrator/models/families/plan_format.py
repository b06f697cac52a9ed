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
are joined in the same order, so the result lines up with the rank's concatenated keys.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Mapping, Optional, Tuple, Union


@dataclass(frozen=True)
class SplitInput:
    split_dim: int
    expected_dims: Optional[int] = None
    split_output: bool = False
    segments: Tuple[str, ...] = ()


@dataclass(frozen=True)
class GatherOutput:
    gather_dim: int
    expected_dims: Optional[int] = None


Entry = Union[Mapping[Union[str, int], SplitInput], GatherOutput, Tuple[GatherOutput, ...]]
#: module name -> what happens at it
SplitPlan = Mapping[str, Entry]


def splits_text(plan: SplitPlan) -> bool:
    """True when the plan splits ``encoder_hidden_states`` (text tokens are sharded like the
    image's, so attention to them is sequence-parallel; else they stay whole on every rank)."""
    return any(isinstance(e, Mapping) and "encoder_hidden_states" in e for e in plan.values())


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
