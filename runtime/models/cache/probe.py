"""TeaCache's probes on the one model path: what the head block's call gives that a family's
rescale polynomial was fitted on (``Family.teacache_probe``, the torch-free record).

* ``timestep``: the head block's time embedding (its ``temb`` argument, or ``timestep`` where
  the block takes that one: PixArt's adaLN-single embedding). It depends on the timestep alone
  (per token where the model embeds a timestep per token, Wan2.2 TI2V), so the decision follows
  the schedule: TeaCache4Wan2.1's ``e0`` (diffusers' ``timestep_proj``, the ``temb`` Wan's blocks
  get) and TeaCache4CogVideoX's ``emb``.
* ``modulated``: the head block's image input normalised and modulated by its ``norm1``
  (diffusers' ``AdaLayerNormZero``: ``norm1(hidden_states, emb=temb)[0]``), per token:
  TeaCache4FLUX's and TeaCache4HunyuanVideo's first double block's modulated input.

A probe runs on this rank's part of the call (its tokens, its rows); :mod:`.cache_rules` reduces
its change over the replica.
"""

from __future__ import annotations

import inspect
from typing import Any, Callable

import torch

from sporch.orchestrator.models.families.base import TEACACHE_PROBES

__all__ = ["PROBES", "make_probe"]

#: ``Family.teacache_probe`` values
PROBES = TEACACHE_PROBES
#: the names a block's time-embedding argument goes by, in the order looked for
TIME_ARGUMENTS = ("temb", "timestep")


def _time_argument(block: torch.nn.Module) -> str | None:
    params = inspect.signature(type(block).forward).parameters  # the class's: hooks replace the instance's
    return next((name for name in TIME_ARGUMENTS if name in params), None)


def make_probe(kind: str, block: torch.nn.Module, metadata: Any) -> Callable[[torch.nn.Module, tuple, dict],
                                                                                 torch.Tensor]:
    """The probe ``kind`` on the head ``block`` (diffusers' ``TransformerBlockMetadata`` reads
    its arguments): a function of the block's call ``(block, args, kwargs)``; a ValueError, one
    line, where the block lacks what the probe reads."""
    name = type(block).__name__
    time_arg = _time_argument(block)
    if time_arg is None:
        raise ValueError(f"TeaCache's {kind} probe reads the head block's time embedding, but {name}.forward takes "
                         f"none of {', '.join(TIME_ARGUMENTS)}")
    if kind == "timestep":
        def probe(module, args, kwargs):
            return metadata._get_parameter_from_args_kwargs(time_arg, args, kwargs)
        return probe
    if kind == "modulated":
        norm = getattr(block, "norm1", None)
        if norm is None or "emb" not in inspect.signature(type(norm).forward).parameters:
            raise ValueError(f"TeaCache's modulated probe runs the head block's norm1(hidden_states, emb=temb), but "
                             f"{name} has no such norm1 (AdaLayerNormZero)")
        hidden = metadata.hidden_states_argument_name

        def modulated(module, args, kwargs):
            x = metadata._get_parameter_from_args_kwargs(hidden, args, kwargs)
            out = module.norm1(x, emb=metadata._get_parameter_from_args_kwargs(time_arg, args, kwargs))
            return out[0] if isinstance(out, (tuple, list)) else out
        return modulated
    raise ValueError(f"unknown TeaCache probe {kind!r}; use one of {', '.join(PROBES)}")
