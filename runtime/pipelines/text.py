"""Prompts -> the transformer's text condition, with the diffusers pipelines' own encoding.

The pipeline class named by the folder's ``model_index.json`` (WanPipeline, FluxPipeline) is
loaded with its text encoders and tokenizers only (``transformer=None, vae=None``) and its
``encode_prompt`` does the rest, so tokenisation, padding and truncation are the pipeline's:

* Wan2.1: umT5 hidden states, cut at each prompt's length and zero-padded to ``text_len``
  (``max_sequence_length``); the negative prompt ("" when unset) the same way, for CFG.
* Flux.1: T5 hidden states padded to ``text_len`` tokens + CLIP's pooled vector.

Placement: one rank per dp replica encodes (cfg rank 0, sequence rank 0: the *leader*) and
frees the encoders; the result goes to the rest of the replica in two broadcasts (over the
leader's cfg group, then over every sequence group), never to other replicas.
"""

from __future__ import annotations

import gc
from typing import Sequence

import torch

from sporch.runtime.model.condition import Condition, cond_map
from sporch.runtime.parallel import ParallelContext

from .replica import share_from_leader
from .spec import GenerateSpec


def load_text_pipeline(root: str, dtype: torch.dtype, device: torch.device):
    """The folder's pipeline with its text encoders and tokenizers only."""
    from diffusers import DiffusionPipeline

    pipe = DiffusionPipeline.from_pretrained(root, transformer=None, vae=None, dtype=dtype)
    return pipe.to(device)


@torch.no_grad()
def encode(spec: GenerateSpec, prompts: Sequence[str], device: torch.device, dtype: torch.dtype,
           cfg: bool) -> tuple[Condition, Condition | None]:
    """(condition, negative condition or None) for ``prompts``, on CPU in ``dtype``."""
    pipe = load_text_pipeline(spec.root, dtype, device)
    try:
        if spec.family == "wan":
            pos, neg = pipe.encode_prompt(list(prompts), negative_prompt=spec.negative_prompt or "",
                                          do_classifier_free_guidance=cfg, max_sequence_length=spec.text_len,
                                          device=device, dtype=dtype)
            cond, null = pos, (neg if cfg else None)
        else:
            text, pooled, _ = pipe.encode_prompt(list(prompts), prompt_2=None, device=device,
                                                 max_sequence_length=spec.text_len)
            cond, null = {"text": text.to(dtype), "pooled": pooled.to(dtype)}, None
    finally:
        del pipe
        gc.collect()
        if device.type == "cuda":
            torch.cuda.empty_cache()
    to_cpu = lambda t: t.detach().to("cpu").contiguous()  # noqa: E731
    return cond_map(cond, to_cpu), (cond_map(null, to_cpu) if null is not None else None)


def encode_for_replica(spec: GenerateSpec, prompts: Sequence[str], ctx: ParallelContext | None, device: torch.device,
                       dtype: torch.dtype, cfg: bool) -> tuple[Condition, Condition | None]:
    """Every rank of the dp replica gets the leader's encoding of ``prompts`` (an error on the
    leader is raised on every rank of the replica, so none waits forever)."""
    return share_from_leader(ctx, lambda: encode(spec, prompts, device, dtype, cfg), "text encoding")
