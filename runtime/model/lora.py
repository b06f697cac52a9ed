"""Merge LoRA adapters into a loaded model (``plan.model.lora``).

For each adapter (sporch.orchestrator.models.lora_targets says which of sporch's parameters
each adapted module changes) every target weight gets

    W += scale x (alpha / rank) x up @ down        (no alpha in the file: alpha = rank)

the fused form of a LoRA layer, as diffusers' ``fuse_lora(lora_scale=scale)`` computes it;
whole-tensor differences beside the pairs (``.diff``, ``.diff_b``, ``.diff_m``: LightX2V's
step-distill adapters) are added as ``P += scale x delta``. A
module that diffusers stores apart but sporch fuses (Flux's q, k, v and single-block MLP input,
``cat``) lands in its rows of the fused weight; a row-permuting transform (Wan's output head,
Flux's output modulation) is applied to the update as to the weight. With sharded parameters
(``parallel.shard_weights``, FSDP2 rows on dim 0) each rank computes only its rows: the up
matrix's rows that fall in its shard, times down.
"""

from __future__ import annotations

import math
from collections import defaultdict
from typing import Any, Mapping, Sequence

import torch
from torch import nn

from sporch.orchestrator.models.checkpoint_files import CheckpointError
from sporch.orchestrator.models.lora_file import read_lora
from sporch.orchestrator.models.lora_targets import DeltaTarget, Target, map_deltas, map_targets
from .finite import nonfinite_weight
from .keymaps.transforms import TRANSFORMS
from .shards import local_rows

#: Transforms that keep the update's rows where they are (a shard computes only its own rows).
ROWS_IN_PLACE = ("copy", "cat")


def adapters(entries: Sequence[Mapping[str, Any]] | None) -> list[tuple[str, float]]:
    """(path, scale) of each ``plan.model.lora`` entry."""
    return [(str(e["path"]), float(e.get("scale", 1.0))) for e in entries or ()]


@torch.no_grad()
def merge_loras(model: nn.Module, entries: Sequence[Mapping[str, Any]] | None) -> nn.Module:
    """Merge every adapter of ``entries`` (``[{path, scale}]``) into ``model``'s weights, in place."""
    from safetensors import safe_open

    state = model.state_dict()
    present = {n[: -len(".weight")] for n in state if n.endswith(".weight")}
    for path, scale in adapters(entries):
        lora = read_lora(path)
        targets = map_targets(lora, model.cfg.attention, present)
        by_param: dict[str, list[Target]] = defaultdict(list)
        for t in targets:
            by_param[t.ours + ".weight"].append(t)
        deltas = map_deltas(lora, model.cfg.attention, set(state))
        with safe_open(str(lora.path), framework="pt", device="cpu") as f:
            for name, ts in by_param.items():
                _merge_one(state[name], ts, f, scale, model.cfg, name, str(lora.path))
                bad = nonfinite_weight(local_rows(state[name])[0])
                if bad:
                    raise CheckpointError(f"{lora.path}: merged with scale {scale:g}, {name}: {bad} (the "
                                          "adapter's update overflows); lower model.lora[].scale or use a "
                                          "wider workload.dtype")
            for d in deltas:
                _add_delta(state[d.ours], d, f, scale, model.cfg, str(lora.path))
                bad = nonfinite_weight(local_rows(state[d.ours])[0])
                if bad:
                    raise CheckpointError(f"{lora.path}: merged with scale {scale:g}, {d.ours}: {bad} (the "
                                          "adapter's difference overflows); lower model.lora[].scale or use a "
                                          "wider workload.dtype")
    return model


def _add_delta(param: torch.Tensor, d: DeltaTarget, f, scale: float, cfg, where: str) -> None:
    """``param += scale x delta`` (a whole-tensor difference: LightX2V's diff / diff_b / diff_m),
    through the name table's transform; a sharded parameter takes its rows."""
    local, rows = local_rows(param)
    raw = f.get_tensor(d.delta.key).to(local.device, torch.float32)
    leaf = d.ours.rsplit(".", 1)[-1]
    try:
        delta = TRANSFORMS[d.transform]([raw], cfg, leaf)
    except RuntimeError:
        delta = None
    if delta is None or delta.numel() != param.numel():
        raise CheckpointError(f"{where}: difference {d.delta.key!r} is {list(raw.shape)}, but sporch's {d.ours} is "
                              f"{list(param.shape)}; the adapter is for another model size")
    delta = delta.reshape(param.shape)
    part = delta if rows is None else delta[rows]
    local.copy_((local.float() + scale * part).to(local.dtype))


def add_low_rank_rows(param: torch.Tensor, up: torch.Tensor, down: torch.Tensor, factor: float, offset: int = 0) -> None:
    """``param[offset : offset + len(up)] += factor x up @ down`` (a 2-D weight), computing only the
    rows this rank holds (all of them when ``param`` is not sharded): its rows of ``up``, times
    ``down``, in float32, added in the weight's dtype."""
    local, rows = local_rows(param)
    start, stop = (0, param.shape[0]) if rows is None else (rows.start, rows.stop)
    lo, hi = max(offset, start), min(offset + up.shape[0], stop)
    if lo < hi:
        rows_of = local[lo - start: hi - start]
        rows_of.copy_((rows_of.float() + factor * (up[lo - offset: hi - offset] @ down)).to(local.dtype))


def _merge_one(param: torch.Tensor, targets: list[Target], f, scale: float, cfg, name: str, where: str) -> None:
    local, rows = local_rows(param)
    full_rows, cols = param.shape[0], math.prod(param.shape[1:])
    for t in targets:
        m = t.module
        up = f.get_tensor(m.up).to(local.device, torch.float32)  # computed where the weight lives
        down = f.get_tensor(m.down).to(local.device, torch.float32)
        factor = scale * m.factor
        if t.transform in ROWS_IN_PLACE:
            offset = t.part * cfg.hidden if t.transform == "cat" else 0
            if m.shape[1] != cols or offset + m.shape[0] > full_rows or (t.transform == "copy" and m.shape[0] != full_rows):
                raise _shape_error(where, m, name, param.shape)
            add_low_rank_rows(param, up, down, factor, offset)
            continue
        try:  # a row permutation (or reshape) of the whole update, then this rank's rows
            delta = TRANSFORMS[t.transform]([up @ down], cfg, "weight")
        except RuntimeError:
            delta = None
        if delta is None or tuple(delta.shape) != tuple(param.shape):
            raise _shape_error(where, m, name, param.shape)
        part = delta if rows is None else delta[rows]
        local.copy_((local.float() + factor * part).to(local.dtype))


def _shape_error(where: str, m, name: str, shape) -> CheckpointError:
    return CheckpointError(f"{where}: LoRA module {m.name!r} changes a {list(m.shape)} weight, but sporch's {name} is "
                           f"{list(shape)}; the adapter is for another model size")
