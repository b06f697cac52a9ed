"""How the plan's placement runs on this rank on the one model path (runtime/pipelines/generate_run.py):
the CFG split over the cfg group, the leader's tiled or the group's row-parallel decode, and the
hooks that run the pipeline's transformer over the sequence and cfg groups. A placement the
generic generate does not run is refused at plan time; a hand-edited plan gets one line here."""

from __future__ import annotations

import contextlib
from typing import Sequence

import torch

from sporch.orchestrator.models.families import Family, PipelineCfg
from sporch.runtime.models.cfg_parallel import CfgParallel
from sporch.runtime.models.cfg_two_calls import CfgTwoCalls
from sporch.runtime.models.families import family_module
from sporch.runtime.models.split_plans import split_plan
from sporch.runtime.models.sequence_parallel import SequenceParallel
from sporch.runtime.parallel import ParallelContext

__all__ = ["cfg_split", "tiled_decode", "parallel_decode", "attach_hooks"]


def cfg_split(family: Family, ctx: ParallelContext | None, shard_weights: str) -> PipelineCfg | None:
    """How ``parallel.cfg=2`` splits the two CFG passes (the family's ``pipeline_cfg``: one batched
    call, or two calls), None without a cfg group. Refused at plan time, and here in one line for a
    hand-edited plan: a family whose pipeline applies no CFG (guidance-distilled), and parameters
    sharded over the world (``shard_weights``) with the two calls split (the cfg ranks' forwards, and
    so their FSDP gathers, do not run together)."""
    if ctx is None or ctx.cfg == 1:
        return None
    if family.pipeline_cfg is PipelineCfg.NONE:
        raise ValueError(f"parallel.cfg={ctx.cfg} is not built for generate on family {family.name}: "
                         f"{family.pipeline_class} runs one transformer pass per step (no CFG to split); plan with "
                         "parallel.cfg=1")
    if family.pipeline_cfg is PipelineCfg.TWO_CALLS and shard_weights == "world":
        raise ValueError(f"parallel.shard_weights=world with parallel.cfg={ctx.cfg} is not built for generate on "
                         f"family {family.name}: its two CFG calls per step run one on each cfg rank; plan with "
                         "parallel.shard_weights=sequence")
    return family.pipeline_cfg


def tiled_decode(family: Family, vae: str) -> bool:
    """Whether the leader decodes in tiles (``plan.placement.vae``); a placement the generic
    generate does not run is refused at plan time (a hand-edited plan gets one line here)."""
    if vae == "leader" or (vae == "tiled" and family.vae_tiling) or (vae == "parallel" and family.vae_parallel):
        return vae == "tiled"
    built = ["leader"] + ["parallel"] * family.vae_parallel + ["tiled"] * family.vae_tiling
    raise ValueError(f"pipeline.vae={vae} is not built for generate on family {family.name} : "
                     f"plan with pipeline.vae={' or '.join(built)}")


def parallel_decode(vae: str, ctx: ParallelContext | None) -> bool:
    """Whether this rank decodes its band of rows (``pipeline.vae: parallel``): every rank of the
    leader's sequence group (cfg rank 0 of the replica), where the group has more than one rank."""
    return vae == "parallel" and ctx is not None and ctx.sequence_size > 1 and ctx.cfg_rank == 0


def attach_hooks(transformers: Sequence[torch.nn.Module], ctx: ParallelContext | None, family: Family,
                 split: PipelineCfg | None) -> contextlib.ExitStack:
    """The hooks that run each of ``transformers`` (the pipeline's: one, or Wan2.2 A14B's two
    experts) over ``ctx``: sequence-parallel over the sequence group (a group of more than one
    rank), then (inside it) CFG-parallel over the cfg group as ``split`` says: the family module's
    ``BATCHED`` arguments' rows (``batched``) or the two calls (``two_calls``)."""
    with contextlib.ExitStack() as stack:
        for transformer in transformers:
            if ctx is not None and ctx.sequence_size > 1:
                stack.enter_context(SequenceParallel(transformer, ctx, split_plan(type(transformer)),
                                                     local_attention=family.local_attention))
            if split is PipelineCfg.BATCHED:
                stack.enter_context(CfgParallel(transformer, ctx, tuple(family_module(family.name).BATCHED)))
            elif split is PipelineCfg.TWO_CALLS:
                stack.enter_context(CfgTwoCalls(transformer, ctx))
        return stack.pop_all()
