"""The generate workload on the generic path: the family's diffusers pipeline, run as it is around
the sequence-parallel transformer (docs/generate.md, "Generic families").

Every rank of a dp replica loads the pipeline folder (``plan.model.weights``): the transformer with
the generic path's strict loader (:func:`sporch.runtime.model.generic.load_diffusers`), the other
parts (text encoders, tokenizers, scheduler, VAE) with diffusers' ``from_pretrained``. While the
pipeline runs, :class:`~sporch.runtime.model.generic.SequenceParallel` is attached to its
transformer: each call splits the tokens over the replica's sequence group at the split plan's
modules, routes attention through USP and gathers the output, so the pipeline sees an unsharded
model returning the whole output on every rank and its own scheduler steps, CFG (both passes on
every rank: ``parallel.cfg=2`` is refused at plan time) and latent handling stay diffusers'.

Prompt ``i`` is denoised alone with ``torch.Generator().manual_seed(seed + i)`` (the noise diffusers'
pipeline draws for that call). Every rank encodes the prompt itself (same inputs, same result: no
broadcast needed); only the replica's leader decodes (``output_type="np"``: the pipeline's own VAE
decode and post-processing), the others stop at the latents. The leader writes one PNG/MP4 per prompt
through :mod:`.media` and returns the same result rows as the hand-built generate.
"""

from __future__ import annotations

import contextlib
import time
from pathlib import Path
from typing import Any, Callable

import numpy as np
import torch

from sporch.orchestrator.contract.families import get_family
from sporch.orchestrator.contract.plan import Plan
from sporch.runtime.measure import peak_memory_bytes, sync
from sporch.runtime.model import resolve_dtype
from sporch.runtime.model.finite import check_output
from sporch.runtime.model.generic.build import load_diffusers
from sporch.runtime.model.generic.plans import split_plan
from sporch.runtime.model.generic.sequence_parallel import SequenceParallel
from sporch.runtime.model.sharded import replica_rows
from sporch.runtime.parallel import ParallelContext

from .media import output_name, write
from .replica import is_leader
from .spec import GenerateSpec, generate_spec
from .stages import Stages

__all__ = ["load_pipeline", "pipeline_arguments", "run_generic_generate"]

#: Pipelines whose text length is the family's ``text_len`` (the transformer's ``max_text_seq_length``:
#: CogVideoX pads every prompt to it); the others keep their default (SD3: 77 CLIP + 256 T5 tokens,
#: Qwen-Image: the prompt's own length, at most 1024), which is what the family's ``text_len`` records.
TEXT_LENGTH_EXACT = ("CogVideoXPipeline",)


def load_pipeline(spec: GenerateSpec, class_name: str, device: torch.device):
    """The diffusers pipeline ``class_name`` from ``spec.root``, its transformer loaded by the
    generic path's loader (strict: every tensor of the folder, none missing)."""
    import diffusers

    dtype = resolve_dtype(spec.dtype)
    transformer = load_diffusers(spec.root, dtype=dtype, device=device)
    pipe = getattr(diffusers, class_name).from_pretrained(spec.root, transformer=transformer, dtype=dtype)
    pipe.set_progress_bar_config(disable=True)
    return pipe.to(device)


def pipeline_arguments(spec: GenerateSpec, class_name: str, prompt: str, seed: int) -> dict[str, Any]:
    """The keyword arguments of the pipeline's call for ``prompt`` (the same a user would pass to
    diffusers to get the same output): size, steps, guidance and negative prompt, the
    prompt's generator; the text length as :data:`TEXT_LENGTH_EXACT` says. CFG off (``spec.cfg``
    False) passes a guidance scale of 1 (no second pass)."""
    kw: dict[str, Any] = dict(prompt=prompt, height=spec.height, width=spec.width, num_inference_steps=spec.steps,
                              generator=torch.Generator().manual_seed(seed))
    if class_name == "QwenImagePipeline":  # true CFG: needs a negative prompt ("" when none is given)
        if spec.cfg:
            kw.update(true_cfg_scale=spec.guidance_scale, negative_prompt=spec.negative_prompt or "")
    else:
        kw.update(guidance_scale=spec.guidance_scale if spec.cfg else 1.0, negative_prompt=spec.negative_prompt)
    if spec.video:
        kw["num_frames"] = spec.frames
    if class_name in TEXT_LENGTH_EXACT:
        kw["max_sequence_length"] = spec.text_len
    return kw


def _frames(out, video: bool) -> np.ndarray:
    """[B, F, H, W, 3] float frames in [0, 1] from a pipeline output with ``output_type="np"``."""
    if video:
        return np.asarray(out.frames, dtype=np.float32)
    return np.asarray(out.images, dtype=np.float32)[:, None]


def run_generic_generate(plan: Plan, ctx: ParallelContext | None, device: torch.device, output_dir: Path,
                         log: Callable[[ParallelContext | None, str], None] | None = None,
                         frames_sink: Callable[[int, Any], None] | None = None) -> dict[str, Any]:
    """Run the generate workload of a generic-path ``plan`` on this rank (see the module docstring);
    ``frames_sink(index, frames)`` (tests) also receives each prompt's float frames [F, H, W, 3] on
    the leader."""
    spec = generate_spec(plan)
    family = get_family(plan.model.family)
    class_name = family.pipeline_class
    if not class_name:  # the planner refuses this; a hand-edited plan gets one line
        raise ValueError(f"family {family.name} has no generic generate pipeline")
    say = log or (lambda c, m: print(m, flush=True) if is_leader(c) else None)
    mine = replica_rows(len(spec.prompts), ctx)
    leader = is_leader(ctx)
    out: dict[str, Any] = {"kind": "generate", "path": "generic", "family": family.name,
                           "diffusers_class": plan.model.diffusers_class, "pipeline": class_name,
                           "prompts": len(mine), "steps": spec.steps,
                           "roles": (["text_encoder"] + (["vae"] if leader else [])) if len(mine) else []}
    if not len(mine):
        out["peak_memory_bytes"] = peak_memory_bytes(device)
        return out
    stages = Stages(device)
    with stages("load"):
        pipe = load_pipeline(spec, class_name, device)
    sharded = ctx is not None and ctx.sequence_size > 1
    step_ms: list[float] = []
    outputs: list[dict[str, Any]] = []
    for index in mine:
        seed = spec.seed + index
        clock = {"t": time.perf_counter()}

        def on_step(p, i, t, kwargs):  # diffusers' callback_on_step_end: after each scheduler step
            sync(device)
            now = time.perf_counter()
            step_ms.append((now - clock["t"]) * 1e3)
            clock["t"] = now
            return {}

        def first_call(module, args, kwargs):  # the steps start after the prompt is encoded
            if not step_ms[start:]:
                clock["t"] = time.perf_counter()

        start = len(step_ms)
        kw = pipeline_arguments(spec, class_name, spec.prompts[index], seed)
        attached = (SequenceParallel(pipe.transformer, ctx, split_plan(type(pipe.transformer)),
                                     local_attention=family.local_attention) if sharded else contextlib.nullcontext())
        handle = pipe.transformer.register_forward_pre_hook(first_call, with_kwargs=True)
        try:
            with stages("pipeline"), torch.no_grad(), attached:
                result = pipe(**kw, output_type="np" if leader else "latent", callback_on_step_end=on_step)
        finally:
            handle.remove()
        if not leader:
            continue
        frames = _frames(result, spec.video)
        check_output(torch.from_numpy(frames), "generate (decoded frames)")
        with stages("save"):
            path = write(Path(output_dir) / output_name(index, spec.prompts[index], spec.output_format), frames[0],
                         spec.output_format, spec.fps)
        f, h, w = frames[0].shape[:3]
        outputs.append({"index": index, "prompt": spec.prompts[index], "seed": seed, "file": path.name,
                        "path": str(path), "format": spec.output_format, "frames": int(f), "height": int(h),
                        "width": int(w)})
        say(ctx, f"wrote {path}")
        if frames_sink is not None:
            frames_sink(index, frames[0])
    out.update(step_ms=step_ms, outputs=outputs, stages=stages.record(steps=len(step_ms)),
               denoised_prompts=len(mine), parameters=sum(p.numel() for p in pipe.transformer.parameters()),
               peak_memory_bytes=peak_memory_bytes(device))
    return out
