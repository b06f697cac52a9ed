"""``sporch inspect PATH``: what a checkpoint is, read from its config.json and its safetensors
headers (no tensor is loaded; standard library only).

The report: the family and format, the model its config describes (the fields and knobs a
job without a preset plans with), parameter count and bytes by dtype, the presets it matches
(or, for the nearest one, every difference), and the bytes of parameters per GPU with the
weights whole on every rank and sharded over 2, 4, 8 ... ranks (``parallel.shard_weights``),
and, given a cluster, the planner's memory per GPU under each placement option for those GPU
counts (placement_report.py).
"""

from __future__ import annotations

import math
from typing import Any, Optional, Sequence

from sporch.orchestrator.config.job_spec import ModelSpec
from sporch.orchestrator.models.checkpoint_files import CheckpointError, open_checkpoint
from sporch.orchestrator.models.families import get_family, require_family
from sporch.orchestrator.models.families.derived_plans import verdict_report
from sporch.orchestrator.contract.parallel import kv_mode
from sporch.orchestrator.models.checkpoint_config import UnknownModelConfig, read_checkpoint_model
from sporch.orchestrator.models.checkpoint_experts import read_expand_timesteps, read_experts
from sporch.orchestrator.contract.sections import ClusterSpec
from sporch.orchestrator.errors import SporchError
from sporch.orchestrator.plan.layouts import divisors
from sporch.orchestrator.plan.placement_report import placement_memory
from sporch.orchestrator.plan.resolve import disagreements, resolve_model

#: Bytes of one element of a safetensors dtype.
DTYPE_BYTES = {"F64": 8, "I64": 8, "U64": 8, "F32": 4, "I32": 4, "U32": 4, "BF16": 2, "F16": 2, "I16": 2,
               "U16": 2, "F8_E4M3": 1, "F8_E5M2": 1, "I8": 1, "U8": 1, "BOOL": 1}
#: Tensor names that say the family and format of a checkpoint without a config.json.
NAME_HINTS = (("double_blocks.", "Flux.1", "original"), ("single_transformer_blocks.", "Flux.1", "diffusers"),
              ("blocks.0.self_attn.q.", "Wan2.1 / Wan2.2", "original"),
              ("blocks.0.attn1.to_q.", "Wan2.1 / Wan2.2", "diffusers"))


def inspect_checkpoint(path: str, gpus: Sequence[int] = (1, 2, 4, 8),
                       cluster: Optional[ClusterSpec] = None) -> dict[str, Any]:
    try:
        files = open_checkpoint(path)
    except CheckpointError as exc:
        raise SporchError(str(exc)) from None
    try:
        model = read_checkpoint_model(path)
        note = None
    except UnknownModelConfig as exc:  # reported; the tensor names may still say the family
        model, note = None, str(exc)
    except CheckpointError as exc:
        raise SporchError(str(exc)) from None
    try:
        experts = read_experts(path)
        expand = read_expand_timesteps(path)
    except CheckpointError as exc:
        raise SporchError(str(exc)) from None
    boundary = experts.boundary_ratio if experts is not None else None
    counts: dict[str, int] = {}
    for info in files.tensors.values():
        counts[info.dtype] = counts.get(info.dtype, 0) + math.prod(info.shape)
    total = sum(counts.values())
    nbytes = sum(n * DTYPE_BYTES.get(d, 4) for d, n in counts.items())
    # no config.json at all: the tensor names may say the family (an original Flux file); an unsupported
    # config says what it is itself (config_note), no guess from names
    family, fmt = (model.family, model.fmt) if model else (_guess(files.tensors) if note is None else (None, None))
    out: dict[str, Any] = {
        "path": str(path), "root": str(files.root), "files": [str(f) for f in files.files],
        "family": family, "format": fmt, "config": str(model.config_file) if model else None, "config_note": note,
        "tensors": len(files.tensors), "parameters": total, "dtypes": counts, "bytes": nbytes,
        "model": dict(model.fields) if model else None,
        "memory_per_gpu": {"whole": nbytes, **{f"sharded over {n}": math.ceil(nbytes / n) for n in gpus if n > 1}},
        # Wan2.2 A14B: the figures above are the first expert's; transformer_2 has as many
        "experts": None if experts is None else {"count": 2, "boundary_ratio": boundary,
                                                 "second": str(experts.second)},
        # Wan2.2 TI2V-5B: one timestep per token (model_index.json's expand_timesteps; None: no index)
        "expand_timesteps": expand,
    }
    out.update(_presets(model, boundary, expand) if model else {"presets": [], "nearest": None})
    out["generic"] = _generic(model, gpus) if model is not None else None
    out["placements"] = None
    if model is not None and cluster is not None:
        try:
            out["placements"] = placement_memory(path, cluster, gpus, out["presets"][0] if out["presets"] else None)
        except SporchError as exc:  # e.g. a model no standard workload fits: said, not fatal
            out["placements"] = {"note": str(exc)}
    return out


def _generic(model, gpus: Sequence[int]) -> dict[str, Any]:
    """The one model path's view: family, class, where its split plan comes from (for a derived one,
    its cached verdict: ``derived_plans.verdict_report``), heads and layers, and the Ulysses x ring
    layouts that work on each GPU count (Ulysses up to the head count: uneven heads are fine; the
    ring takes the rest)."""
    fam = require_family(model.diffusers_class)
    heads, kv = model.fields["num_heads"], model.fields.get("num_kv_heads", model.fields["num_heads"])
    layouts = {n: [f"U{u}R{n // u}" for u in divisors(n) if u <= heads and kv_mode(heads, kv, u) is not None]
               for n in gpus}
    derived = verdict_report(model.diffusers_class) if model.diffusers_class in fam.derived else None
    return {"family": fam.name, "class": model.diffusers_class, "split_plan": fam.split_plan_source(model.diffusers_class),
            "heads": heads, "kv_heads": kv, "layers": model.fields["depth"] + model.fields.get("single_depth", 0),
            "layouts": layouts, "derived": derived}


def _guess(tensors) -> tuple[Optional[str], Optional[str]]:
    for hint, family, fmt in NAME_HINTS:
        if any(name.startswith(hint) or f".{hint}" in name for name in tensors):
            return family, fmt
    return None, None


def _presets(model, boundary: Optional[float] = None, expand: Optional[bool] = None) -> dict[str, Any]:
    """The presets of the checkpoint's family it matches, or the nearest one and how it differs
    (``boundary``: the folder's two experts' boundary_ratio, None for one transformer; ``expand``:
    its model_index.json's expand_timesteps, None without one). Test models (``tiny``) are not
    published releases: never matched."""
    found: list[tuple[str, list[str]]] = []
    for preset in get_family(model.family_key).presets:
        if preset.test_model:
            continue
        section = resolve_model(ModelSpec(preset=preset.name))
        wrong = disagreements(model, section, preset.config, label="preset")
        if preset.boundary_ratio != boundary:
            wrong.append(f"boundary_ratio {boundary!r} (preset: {preset.boundary_ratio!r}, model_index.json)")
        if expand is not None and preset.expand_timesteps != expand:
            wrong.append(f"expand_timesteps {expand!r} (preset: {preset.expand_timesteps!r}, model_index.json)")
        found.append((preset.name, wrong))
    matches = [name for name, wrong in found if not wrong]
    nearest = min(((len(wrong), name, wrong) for name, wrong in found if wrong), default=None)
    return {"presets": matches,
            "nearest": None if matches or nearest is None else {"preset": nearest[1], "differences": nearest[2]}}
