"""Loading the family's diffusers pipeline (runtime/pipelines/generate_run.py): its transformer (and
Wan2.2 A14B's second expert, ``transformer_2``) built as the plan places it, the other parts by
diffusers' ``from_pretrained``."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Mapping, Sequence

import torch

from sporch.orchestrator.models.lora_experts import for_expert
from sporch.runtime.models.placed import build_transformer
from sporch.runtime.models.dtypes import resolve_dtype
from sporch.runtime.parallel import ParallelContext

from sporch.runtime.pipelines.prompts import is_prompt_part
from sporch.runtime.pipelines.params import GenerateParams

__all__ = ["load_pipeline", "experts_of", "SECOND_EXPERT"]

#: the low-noise expert's sub-folder and component name (Wan2.2 A14B)
SECOND_EXPERT = "transformer_2"


def load_pipeline(spec: GenerateParams, class_name: str, device: torch.device, *, text: bool = True,
                  text_device: torch.device | None = None, lora: Sequence[Mapping[str, Any]] | None = None,
                  ctx: ParallelContext | None = None, shard_weights: str = "none", quant: str | None = None,
                  transformers: bool = True, second_device: torch.device | None = None):
    """The diffusers pipeline ``class_name`` from ``spec.root``, its transformer loaded by the
    generic path's loader (strict: every tensor of the folder, none missing) with the adapters
    ``lora`` (``plan.model.lora``; each entry's ``expert``: both, transformer or transformer_2)
    merged into it as verify/benchmark merge them (:func:`sporch.runtime.models.lora.apply_lora`:
    the family's diffusers LoRA loader, fused at their scales, PEFT layers unloaded; with sharded
    parameters :func:`~sporch.runtime.models.lora.merge_lora_rows`, each rank its rows). A
    two-expert folder (``spec.boundary_ratio``) gets its ``transformer_2`` built the same way.
    ``text``: load the prompt parts too (text encoders, tokenizers, an image encoder; on
    ``text_device``, default ``device``); without them the pipeline runs from embeddings only.
    ``shard_weights`` (over ``ctx``) and ``quant``: the plan's placement of the transformers'
    parameters (``plan.placement.shard_weights``: FSDP2, each rank reading its rows; ``model.quant``),
    built by :func:`sporch.runtime.models.placed.build_transformer` as verify/benchmark build it.
    ``transformers=False``: none built (``sporch decode``: the decode tail alone). ``second_device``: where
    ``transformer_2`` is built (host memory when the idle expert waits there: ``pipeline.experts: offload``)."""
    import diffusers

    cls = getattr(diffusers, class_name)
    dtype = resolve_dtype(spec.dtype)
    experts = {"transformer": Path(spec.root)}
    if spec.boundary_ratio is not None:
        experts[SECOND_EXPERT] = Path(spec.root) / SECOND_EXPERT
    built = {name: build_transformer(weights=str(folder), class_name="", config=None, ctx=ctx,
                                     shard_weights=shard_weights, quant=quant, lora=for_expert(lora, index),
                                     dtype=dtype, device=(second_device or device) if index else device)
             if transformers else None for index, (name, folder) in enumerate(experts.items())}
    skip = {} if text else {name: None for name in _components(spec.root) if is_prompt_part(name)}
    pipe = cls.from_pretrained(spec.root, **built, dtype=dtype, **skip)
    pipe.set_progress_bar_config(disable=True)
    for name, part in pipe.components.items():  # each part straight to where it runs
        if isinstance(part, torch.nn.Module) and name not in built:  # built on ``device`` (maybe sharded)
            part.to(text_device if (is_prompt_part(name) and text_device is not None) else device)
    return pipe


def experts_of(pipe) -> list[torch.nn.Module]:
    """The pipeline's transformers: ``transformer`` and, for two experts, ``transformer_2``."""
    return [t for t in (getattr(pipe, "transformer", None), getattr(pipe, SECOND_EXPERT, None)) if t is not None]


def _components(root: str) -> list[str]:
    """The component names of the pipeline folder ``root`` (its ``model_index.json``)."""
    index = json.loads((Path(root) / "model_index.json").read_text(encoding="utf-8"))
    return [k for k, v in index.items() if not k.startswith("_") and isinstance(v, list)]
