"""Loading the family's diffusers pipeline on the generic path (runtime/pipelines/generic.py): its
transformer built as the plan places it, the other parts by diffusers' ``from_pretrained``."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Mapping, Sequence

import torch

from sporch.runtime.model import resolve_dtype
from sporch.runtime.model.generic.placed import build_transformer
from sporch.runtime.parallel import ParallelContext

from .generic_text import is_text_part
from .params import GenerateParams

__all__ = ["load_pipeline"]


def load_pipeline(spec: GenerateParams, class_name: str, device: torch.device, *, text: bool = True,
                  text_device: torch.device | None = None, lora: Sequence[Mapping[str, Any]] | None = None,
                  ctx: ParallelContext | None = None, shard_weights: str = "none", quant: str | None = None):
    """The diffusers pipeline ``class_name`` from ``spec.root``, its transformer loaded by the
    generic path's loader (strict: every tensor of the folder, none missing) with the adapters
    ``lora`` (``plan.model.lora``) merged into it as verify/benchmark merge them
    (:func:`sporch.runtime.model.generic.lora.apply_lora`: the family's diffusers LoRA loader,
    fused at their scales, PEFT layers unloaded; with sharded parameters
    :func:`~sporch.runtime.model.generic.lora.merge_lora_rows`, each rank its rows). ``text``: load the text encoders and tokenizers
    too (on ``text_device``, default ``device``); without them the pipeline runs from prompt
    embeddings only. ``shard_weights`` (over ``ctx``) and ``quant``: the plan's placement of the
    transformer's parameters (``plan.placement.shard_weights``: FSDP2, each rank reading its rows;
    ``model.quant``), built by :func:`sporch.runtime.model.generic.placed.build_transformer` as
    verify/benchmark build it."""
    import diffusers

    cls = getattr(diffusers, class_name)
    dtype = resolve_dtype(spec.dtype)
    transformer = build_transformer(weights=spec.root, class_name="", config=None, ctx=ctx, shard_weights=shard_weights,
                                    quant=quant, lora=lora, dtype=dtype, device=device)
    skip = {} if text else {name: None for name in _components(spec.root) if is_text_part(name)}
    pipe = cls.from_pretrained(spec.root, transformer=transformer, dtype=dtype, **skip)
    pipe.set_progress_bar_config(disable=True)
    for name, part in pipe.components.items():  # each part straight to where it runs
        if isinstance(part, torch.nn.Module) and part is not transformer:  # built on ``device`` (maybe sharded)
            part.to(text_device if (is_text_part(name) and text_device is not None) else device)
    return pipe


def _components(root: str) -> list[str]:
    """The component names of the pipeline folder ``root`` (its ``model_index.json``)."""
    index = json.loads((Path(root) / "model_index.json").read_text(encoding="utf-8"))
    return [k for k, v in index.items() if not k.startswith("_") and isinstance(v, list)]
