"""The prompts' embeddings (runtime/pipelines/generate_run.py): the pipeline's prompt parts (text encoders
and tokenizers; an image encoder where the model reads ``workload.image`` as tokens too), each prompt
encoded by the pipeline's own ``encode_prompt`` (and ``encode_image``), the replica's prompts encoded
once (by the leader and shared, or by the whole sequence group with ``pipeline.text_encoder:
sharded``), and the prompt parts dropped once they are done."""

from __future__ import annotations

from typing import Any

import torch

from sporch.orchestrator.models.families import Family
from sporch.runtime.models.families import family_module
from sporch.runtime.models.shard_weights import resident_parameter_bytes
from sporch.runtime.parallel import ParallelContext

from sporch.runtime.pipelines.params import GenerateParams
from sporch.runtime.pipelines.phase_timing import PhaseTimer
from sporch.runtime.pipelines.replica import share_from_leader
from sporch.runtime.pipelines.text import encoder_peak

__all__ = ["is_prompt_part", "text_encoders", "encoder_sizes", "encode", "encode_prompts", "drop_prompt_parts"]


def is_prompt_part(name: str) -> bool:
    """A pipeline component only prompt encoding needs (text encoders, tokenizers; Wan2.1 I2V's CLIP
    image encoder and its processor, which the leader runs once with the text)."""
    return name.startswith(("text_encoder", "tokenizer", "image_encoder", "image_processor"))


def text_encoders(pipe) -> list[torch.nn.Module]:
    """The text encoders ``pipe`` holds (none once dropped, or where it was loaded without them)."""
    return [part for name, part in pipe.components.items()
            if name.startswith("text_encoder") and isinstance(part, torch.nn.Module)]


def encoder_sizes(pipe) -> dict[str, int]:
    """What this rank holds of the text encoders (sharded: its shards) against their whole size,
    as result keys; empty without encoders."""
    encoders = text_encoders(pipe)
    if not encoders:
        return {}
    return {"text_encoder_resident_bytes": sum(resident_parameter_bytes(e) for e in encoders),
            "text_encoder_bytes": sum(p.numel() * p.element_size() for e in encoders for p in e.parameters())}


def encode(pipe, spec: GenerateParams, family: Family, prompt: str, device: torch.device,
           image: Any = None) -> dict[str, Any]:
    """The prompt (and, with CFG, the negative prompt; with ``image``, the image where the model
    reads it as tokens) encoded by the pipeline's own ``encode_prompt`` as its call would encode them
    (the family module's ``encode``): the call's embedding arguments, on the CPU."""
    extra = {"image": image} if image is not None else {}
    out = family_module(family.name).encode(pipe, prompt, negative=spec.negative_prompt, cfg=spec.cfg,
                                            text_len=spec.text_len, device=device, **extra)
    return {k: on_device(v, "cpu") for k, v in out.items()}


def on_device(value: Any, device: Any) -> Any:
    """An embedding argument on ``device``: a tensor, or each tensor of a list of them (Z-Image's
    per-prompt caption states); anything else as it is."""
    if torch.is_tensor(value):
        return value.to(device)
    if isinstance(value, (list, tuple)) and value and all(torch.is_tensor(v) for v in value):
        return type(value)(v.to(device) for v in value)
    return value


def encode_prompts(pipe, spec: GenerateParams, family: Family, prompts: list[str], device: torch.device,
                   stages: PhaseTimer, ctx: ParallelContext | None, *, sharded: bool,
                   image: Any = None) -> tuple[list[dict[str, Any]], int | None]:
    """Each of ``prompts`` encoded (:func:`encode`, in their order) on every rank of the replica:
    ``sharded``, by the whole sequence group with its shards of the encoders (the same embeddings on
    every rank); else by the replica's leader, shared with the others. With the encoders' peak
    bytes (their parameters held at the busiest moment) on a rank that encoded, else None."""
    peak_bytes: list[int] = []

    def encode_all() -> list[dict[str, Any]]:
        with stages("encode"), torch.no_grad(), encoder_peak(text_encoders(pipe)) as peak:
            got = [encode(pipe, spec, family, p, device, image) for p in prompts]
        peak_bytes.append(peak.bytes)
        return got

    if sharded:
        with ctx.guard():
            embeds = encode_all()
    else:
        embeds = share_from_leader(ctx, encode_all, "encoding the prompts")
    return embeds, (peak_bytes[0] if peak_bytes else None)


def drop_prompt_parts(pipe) -> None:
    """The text encoders and tokenizers (and an image encoder) are done: freed before the
    transformer runs."""
    for name in list(pipe.components):
        if is_prompt_part(name):
            setattr(pipe, name, None)
