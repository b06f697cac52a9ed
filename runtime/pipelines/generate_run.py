"""The generate workload on the one model path: the family's diffusers pipeline, run as it is around
the sequence-parallel transformer (docs/generate.md, "Generic families").

Every rank of a dp replica loads the pipeline folder (``plan.model.weights``): the transformer with
the one model path's strict loader (:func:`sporch.runtime.models.load_diffusers`, or sharded), the
scheduler and VAE with diffusers' ``from_pretrained``; the replica's leader also loads the text
encoders and tokenizers (on its GPU, or its CPU with ``pipeline.text_encoder: cpu``), encodes every
prompt of the replica with the pipeline's own ``encode_prompt`` (as its call would), hands the
embeddings to the replica (:func:`.replica.share_from_leader`) and frees the encoders. With
``pipeline.text_encoder: sharded`` every rank of the sequence group loads them into host memory,
shards them over the group (:func:`.text.shard_text_encoders`, FSDP2) and
the whole group encodes: every rank gets the same embeddings, no broadcast. Then, per
prompt, every rank calls the pipeline with those embeddings while
:class:`~sporch.runtime.models.SequenceParallel` is attached to its transformer: each
transformer call splits the tokens over the replica's sequence group at the split plan's modules,
routes attention through USP and gathers the output, so the pipeline sees an unsharded model
returning the whole output on every rank, and its scheduler steps, CFG and latent handling stay
diffusers'. With ``parallel.cfg=2`` the two CFG passes are split over the cfg group as the
family's pipeline applies CFG (``Family.pipeline_cfg``): where it batches both passes into one
transformer call (``batched``: SD3, CogVideoX, LTX-Video)
:class:`~sporch.runtime.models.cfg_parallel.CfgParallel` is attached: each cfg rank's
transformer computes its half of that ``[uncond, cond]`` batch (the family module's ``BATCHED``
arguments) on its sequence group and the halves are all-gathered over the cfg group; where it calls
the transformer twice per step (``two_calls``: Qwen-Image's true CFG, "cond" then "uncond")
:class:`~sporch.runtime.models.cfg_two_calls.CfgTwoCalls` is: cfg rank 0 computes the
"cond" call, cfg rank 1 the "uncond" call, and the two predictions are exchanged at the end of the
second. Either way every rank gets the whole noise prediction and steps its scheduler identically.

Prompt ``i`` is denoised alone with ``torch.Generator().manual_seed(seed + i)`` (the noise diffusers'
pipeline draws for that call). Only the leader decodes (``output_type="np"``: the pipeline's own VAE
decode and post-processing), the others stop at the latents. ``plan.placement.vae``: ``leader``
decodes whole; ``tiled`` (planned where the family's VAE has a tiled decode, ``Family.vae_tiling``)
calls the VAE's ``enable_tiling()`` with no arguments first: diffusers' default tile sizes of that
class. ``parallel`` (planned where the
family's VAE decodes exactly by row bands, ``Family.vae_parallel``): every rank of the leader's
sequence group (cfg rank 0) runs the pipeline to its end (``output_type="np"``) with the VAE
replaced by :func:`.vae_parallel.decode.row_parallel_vae`'s copy, whose decoder takes this rank's band of
the latent's rows and returns the whole decoded tensor (gathered over the group), so the pipeline's
own decode tail (latent un-normalisation and unpacking, the VAE's ``decode``, the image/video
processor) runs unchanged around it; only the leader writes. The leader writes one PNG/MP4 per
prompt through :mod:`.media` and returns one result row per prompt.

The plan's options apply as on verify/benchmark: ``model.lora`` merged into the
transformer at load (:func:`.load.load_pipeline`), its parameters sharded (``parallel.shard_weights``) or
quantised (``model.quant``) as the plan places them, its blocks compiled by the caller's
``compile_model`` (runtime/workloads.py: ``workload.compile``'s rule), and ``workload.cache``
(every method) applied with :func:`sporch.runtime.models.cache.apply.apply_step_cache` to the
transformer (and to a two-expert pipeline's ``transformer_2``, its own state), whose decision is
agreed over the replica (over each cfg rank's sequence group where the two calls are split: each
cfg rank's cache holds the one context it computes, and the records are shared over the cfg group
after each prompt); the pipelines open the cache contexts themselves. The metrics' ``step_cache``
has one entry per prompt in ``batches`` (:func:`~sporch.runtime.models.cache.record.step_cache_result`).

A USR2 stop is agreed over the replica at a step boundary (the pipeline's step callback:
``callback_on_step_end``, or the older ``callback`` where a pipeline has only that,
:func:`.denoise.step_end_arguments`); each rank's
step file (:mod:`.step_checkpoint`'s format) lets the requeued run resume the prompt from that step through
the same pipeline call (:mod:`.resume`: the finished steps' transformer calls skipped, the
latents and scheduler state put back at the boundary), where the folder's scheduler is one checked
exact; otherwise the prompt restarts. A prompt an earlier run of the same plan finished (its file
written and recorded, :class:`.resume.FinishedPrompts`) is not denoised again: its recorded
result row is listed (``reused_outputs``).

This module runs the workload on the rank; its parts: :mod:`.placement` (the CFG split, the
decode placement, the transformer's hooks), :mod:`.load` (the pipeline), :mod:`.prompts`
(the prompts' embeddings), :mod:`.denoise` (each prompt's pipeline call: its arguments, its
step callback, its resume) and :mod:`.output` (the leader's file and result row per prompt).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Callable

import torch

from sporch.orchestrator.models.families import PipelineCfg, get_family
from sporch.orchestrator.contract.plan import Plan
from sporch.runtime.measure import peak_memory_bytes
from sporch.runtime.models.cache.decision import REDUCED_OVER
from sporch.runtime.models.cache.apply import apply_step_cache
from sporch.runtime.models.cache.record import batch_record, step_cache_result
from sporch.runtime.models.cfg_two_calls import share_over_cfg
from sporch.runtime.models.shard_weights import resident_parameter_bytes
from sporch.runtime.parallel import ParallelContext, replica_rows
from sporch.runtime.progress import Progress

from sporch.runtime.pipelines.expert_switch import ExpertSwitch
from sporch.runtime.pipelines.denoise import PromptDenoiser
from sporch.runtime.pipelines.kept_latents import KeptLatents
from sporch.runtime.pipelines.load import experts_of, load_pipeline
from sporch.runtime.pipelines.output import result_frames, write_prompt
from sporch.runtime.pipelines.placement import cfg_split, parallel_decode, tiled_decode
from sporch.runtime.pipelines.resume import FinishedPrompts, resume_refusal
from sporch.runtime.pipelines.prompts import drop_prompt_parts, encode_prompts, encoder_sizes
from sporch.runtime.pipelines.media import load_image, output_name
from sporch.runtime.pipelines.params import generate_params
from sporch.runtime.pipelines.phase_timing import PhaseTimer
from sporch.runtime.pipelines.replica import is_leader
from sporch.runtime.pipelines.step_checkpoint import DenoiseCheckpoint, plan_key
from sporch.runtime.pipelines.schedulers import apply_scheduler_options
from sporch.runtime.pipelines.text import shard_text_encoders
from sporch.runtime.pipelines.tiny import ensure_tiny_pipeline
from sporch.runtime.pipelines.vae_parallel.decode import row_parallel_vae

__all__ = ["run_pipeline"]


def run_pipeline(plan: Plan, ctx: ParallelContext | None, device: torch.device, output_dir: Path,
                         log: Callable[[ParallelContext | None, str], None] | None = None,
                         frames_sink: Callable[[int, Any], None] | None = None,
                         compile_model: Callable[[torch.nn.Module], Any] | None = None,
                         progress: Progress | None = None) -> dict[str, Any]:
    """Run the generate workload of ``plan`` on this rank (see the module docstring);
    ``frames_sink(index, frames)`` (tests) also receives each prompt's float frames [F, H, W, 3] on
    the leader. ``compile_model(transformer)``: compiles the transformer's blocks where the plan
    says so (runtime/workloads.py, the rule verify/benchmark follow) and returns the
    ``CompileInfo``; None: eager. The first denoising step includes the compiling
    (``compile.first_call_s``). ``progress`` carries the USR2 stop request: it is agreed over the
    replica at a step boundary, each rank's step file of that step is kept (:mod:`.resume`)
    and :class:`RequeueRequested` raised; a requeued run resumes the prompt from that step."""
    spec = generate_params(plan)
    family = get_family(plan.model.family)
    class_name = family.image_pipeline_class if spec.image else family.pipeline_class
    if not class_name:  # the planner refuses this; a hand-edited plan gets one line
        raise ValueError(f"family {family.name} has no generate pipeline{' taking an image' if spec.image else ''}")
    ensure_tiny_pipeline(spec, ctx)
    split = cfg_split(family, ctx, plan.placement.shard_weights)
    tiled = tiled_decode(family, plan.placement.vae)
    say = log or (lambda c, m: print(m, flush=True) if is_leader(c) else None)
    mine = replica_rows(len(spec.prompts), ctx)
    leader = is_leader(ctx)
    # pipeline.text_encoder: sharded: every rank of the sequence group encodes (one rank: the leader alone)
    sharded = spec.text_encoder == "sharded" and ctx is not None and ctx.sequence_size > 1
    parallel = parallel_decode(plan.placement.vae, ctx)
    decodes = leader or parallel  # this rank runs the pipeline's decode tail
    roles = [r for r, on in (("text_encoder", leader or sharded), ("vae", decodes)) if on]
    out: dict[str, Any] = {"kind": "generate", "path": "diffusers", "family": family.name,
                           "diffusers_class": plan.model.diffusers_class, "pipeline": class_name,
                           "prompts": len(mine), "steps": spec.steps, "roles": roles if len(mine) else []}
    if not len(mine):
        out["peak_memory_bytes"] = peak_memory_bytes(device)
        return out
    # prompts an earlier run of this plan finished (output written and recorded): not denoised again
    finished = FinishedPrompts(output_dir, plan_key(plan))
    reused = finished.agreed(ctx, {i: Path(output_dir) / output_name(i, spec.prompts[i], spec.output_format)
                                   for i in mine})
    out["reused_outputs"] = sorted(reused)
    if reused:
        say(ctx, f"{len(reused)} prompt(s) already written by an earlier run of this job: not denoised again")
    kept = KeptLatents(spec, output_dir, plan.workload.cache)
    # prompts whose latents an earlier run kept (the family decodes them without its transformer): decoded only
    decoded_only = kept.agreed(ctx, [i for i in mine if i not in reused], family)
    if decoded_only:
        say(ctx, f"{len(decoded_only)} prompt(s) already denoised (latents in {kept.store.folder}): decoding them "
                 "without denoising again")
    todo = [i for i in mine if i not in reused and i not in decoded_only]
    if not todo and not decoded_only:  # nothing left: neither the pipeline nor the encoders are loaded
        out.update(outputs=[reused[i] for i in mine] if leader else [], denoised_prompts=0, step_ms=[], resumed={},
                   roles=[], peak_memory_bytes=peak_memory_bytes(device))
        return out
    stages = PhaseTimer(device)
    outputs: dict[int, dict[str, Any]] = {i: reused[i] for i in reused} if leader else {}
    if not todo:  # every prompt left is kept as latents: the leader decodes them, no transformer, no encoder
        if leader:
            with stages("load"):
                pipe = load_pipeline(spec, class_name, device, text=False, transformers=False)
                if tiled:
                    pipe.vae.enable_tiling()
            _decode_kept(pipe, family, kept, decoded_only, spec, output_dir, stages, finished, outputs, say,
                         frames_sink)
        out.update(outputs=[outputs[i] for i in mine if i in outputs], denoised_prompts=0, step_ms=[], resumed={},
                   reused_latents=sorted(decoded_only), stages=stages.record(steps=0),
                   peak_memory_bytes=peak_memory_bytes(device))
        return out
    text_device = torch.device("cpu") if spec.text_encoder == "cpu" else device
    with stages("load"):
        offload = spec.experts == "offload" and spec.boundary_ratio is not None
        pipe = load_pipeline(spec, class_name, device, text=leader or sharded,
                             text_device=torch.device("cpu") if sharded else text_device, lora=plan.model.lora,
                             ctx=ctx, shard_weights=plan.placement.shard_weights, quant=plan.model.quant,
                             second_device=torch.device("cpu") if offload else None)
        switch = ExpertSwitch(pipe, spec.experts, device)
        if sharded:
            shard_text_encoders(pipe, ctx, device)
        apply_scheduler_options(pipe, spec)
    if tiled and leader:  # diffusers' tiled decode, the class's default tile sizes
        pipe.vae.enable_tiling()
    if leader:  # kept latents first, with the whole VAE (before a parallel decode replaces it)
        _decode_kept(pipe, family, kept, decoded_only, spec, output_dir, stages, finished, outputs, say, frames_sink)
    if parallel:  # the VAE's decoder on this rank's rows, the whole output gathered (every rank of the group)
        pipe.vae = row_parallel_vae(pipe.vae, ctx.sequence_group)
    out.update(shard_weights=plan.placement.shard_weights, quant=plan.model.quant or "none", vae=plan.placement.vae,
               resident_parameter_bytes=sum(resident_parameter_bytes(t) for t in experts_of(pipe)),
               text_encoder=spec.text_encoder)
    out.update(encoder_sizes(pipe))  # what this rank holds of the text encoders (sharded: its shards)
    compiled = compile_model(pipe.transformer) if compile_model is not None else None
    # workload.cache: diffusers' cache hooks, the decision agreed over the replica (models/cache/apply.py), on each
    # transformer (a two-expert pipeline's transformer_2 its own); the pipelines open the cache contexts
    # themselves ("cond"/"uncond", "cond_uncond"; none: the default one); reset before each prompt. With the
    # two calls split each cfg rank computes one context: agreed over its sequence group only
    two_calls = split is PipelineCfg.TWO_CALLS
    head_hook = apply_step_cache(experts_of(pipe), plan.workload.cache, ctx, num_steps=spec.steps,
                                 preset=plan.model.preset,
                                 groups=("sequence",) if two_calls else REDUCED_OVER)
    step_cache: list[dict[str, Any]] = []
    image = load_image(spec.image) if spec.image else None
    prompts = [spec.prompts[i] for i in todo]
    # sharded: the whole sequence group encodes, the same embeddings on every rank; else the leader, shared
    embedded, peak = encode_prompts(pipe, spec, family, prompts, text_device, stages, ctx, sharded=sharded,
                                    image=image)
    if peak is not None:  # the encoders' parameters held at the busiest moment
        out["text_encoder_peak_bytes"] = peak
    embeds = iter(embedded)  # in the order of ``todo``
    if leader or sharded:  # the prompt parts are done: freed before the transformer runs
        drop_prompt_parts(pipe)
        say(ctx, f"encoded {len(prompts)} prompt(s) in {stages.seconds('encode'):.1f} s")
    ckpt = DenoiseCheckpoint(output_dir, ctx, (lambda: progress.stop_requested) if progress is not None
                             else (lambda: False), key=plan_key(plan))
    refusal = resume_refusal(pipe.scheduler, head_hook is not None)  # the same on every rank: same folder, plan
    if refusal is not None:
        say(ctx, f"a requeued prompt restarts its denoising: {refusal}")
    denoiser = PromptDenoiser(pipe, spec, family, ctx, split, device, ckpt, refusal, head_hook, decodes=decodes,
                              leader=leader, count=len(mine), say=say, image=image,
                              keep_latents=kept.keep if leader else None, switch=switch)
    for k, index in enumerate(mine):
        if index not in todo:
            continue
        seed = spec.seed + index
        got = denoiser.denoise(k, seed, next(embeds), index)
        if head_hook is not None:  # this prompt's steps computed / skipped, per cache context
            step_cache.append(batch_record(index, share_over_cfg(got.cache, ctx) if two_calls else got.cache))
        # denoise: the call up to its last step; decode: the rest (the leader's VAE and post-processing)
        stages.add("denoise", got.last_step - got.began)
        if decodes:
            stages.add("decode", got.ended - got.last_step)
        if not leader:
            continue
        row, frames = write_prompt(result_frames(got.result, spec.video), spec, index, seed, output_dir, stages,
                                   finished)
        outputs[index] = row
        say(ctx, f"wrote {row['path']}")
        if frames_sink is not None:
            frames_sink(index, frames)
    step_ms = denoiser.step_ms
    if compiled is not None and compiled.enabled and step_ms:  # the first step compiled the blocks
        compiled.first_call_s = step_ms[0] / 1e3
    steady = sorted(step_ms[1:])
    if head_hook is not None:  # every rank of the replica skipped the same steps (checked: a difference raises)
        out["step_cache"] = step_cache_result(plan.workload.cache, step_cache, ctx)
    out.update(lora_adapters=len(plan.model.lora or []),
               compile=compiled.record(steady[len(steady) // 2] / 1e3 if steady else None) if compiled else None)
    out.update(step_ms=step_ms, outputs=[outputs[i] for i in mine if i in outputs], resumed=denoiser.resumed,
               stages=stages.record(steps=len(step_ms)), encode_s=stages.seconds("encode"),
               denoised_prompts=len(todo), reused_latents=sorted(decoded_only),
               parameters=sum(p.numel() for t in experts_of(pipe) for p in t.parameters()),
               peak_memory_bytes=peak_memory_bytes(device))
    if switch.two:  # Wan2.2 A14B: where each prompt switched to the low-noise expert, where the idle one waited
        out["experts"] = {**switch.record(), "boundary_ratio": spec.boundary_ratio}
        out["expert_switch_step"] = switch.switch_steps[0] if switch.switch_steps else None
    switch.remove()
    return out


def _decode_kept(pipe, family, kept: KeptLatents, indices: list[int], spec, output_dir: Path, stages: PhaseTimer,
                 finished: FinishedPrompts, outputs: dict[int, dict[str, Any]], say, frames_sink) -> None:
    """The leader decodes the prompts whose latents an earlier run kept (the family's decode tail) and
    writes their files: no denoising, no text encoder."""
    for index in indices:
        with stages("decode"):
            frames = kept.decode(pipe, family, index, spec)
        row, frames = write_prompt(frames, spec, index, spec.seed + index, output_dir, stages, finished)
        outputs[index] = row
        say(None, f"wrote {row['path']}")
        if frames_sink is not None:
            frames_sink(index, frames)
