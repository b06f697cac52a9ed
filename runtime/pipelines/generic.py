"""The generate workload on the generic path: the family's diffusers pipeline, run as it is around
the sequence-parallel transformer (docs/generate.md, "Generic families").

Every rank of a dp replica loads the pipeline folder (``plan.model.weights``): the transformer with
the generic path's strict loader (:func:`sporch.runtime.model.generic.load_diffusers`, or sharded), the
scheduler and VAE with diffusers' ``from_pretrained``; the replica's leader also loads the text
encoders and tokenizers (on its GPU, or its CPU with ``pipeline.text_encoder: cpu``), encodes every
prompt of the replica with the pipeline's own ``encode_prompt`` (as its call would), hands the
embeddings to the replica (:func:`.replica.share_from_leader`) and frees the encoders. With
``pipeline.text_encoder: sharded`` every rank of the sequence group loads them into host memory,
shards them over the group (:func:`.text.shard_text_encoders`, FSDP2 as the hand-built path) and
the whole group encodes: every rank gets the same embeddings, no broadcast. Then, per
prompt, every rank calls the pipeline with those embeddings while
:class:`~sporch.runtime.model.generic.SequenceParallel` is attached to its transformer: each
transformer call splits the tokens over the replica's sequence group at the split plan's modules,
routes attention through USP and gathers the output, so the pipeline sees an unsharded model
returning the whole output on every rank, and its scheduler steps, CFG and latent handling stay
diffusers'. With ``parallel.cfg=2`` the two CFG passes are split over the cfg group as the
family's pipeline applies CFG (``Family.pipeline_cfg``): where it batches both passes into one
transformer call (``batched``: SD3, CogVideoX, LTX-Video)
:class:`~sporch.runtime.model.generic.cfg_parallel.CfgParallel` is attached: each cfg rank's
transformer computes its half of that ``[uncond, cond]`` batch (the family module's ``BATCHED``
arguments) on its sequence group and the halves are all-gathered over the cfg group; where it calls
the transformer twice per step (``two_calls``: Qwen-Image's true CFG, "cond" then "uncond")
:class:`~sporch.runtime.model.generic.cfg_two_calls.CfgTwoCalls` is: cfg rank 0 computes the
"cond" call, cfg rank 1 the "uncond" call, and the two predictions are exchanged at the end of the
second. Either way every rank gets the whole noise prediction and steps its scheduler identically.

Prompt ``i`` is denoised alone with ``torch.Generator().manual_seed(seed + i)`` (the noise diffusers'
pipeline draws for that call). Only the leader decodes (``output_type="np"``: the pipeline's own VAE
decode and post-processing), the others stop at the latents. ``plan.placement.vae``: ``leader``
decodes whole; ``tiled`` (planned where the family's VAE has a tiled decode, ``Family.vae_tiling``)
calls the VAE's ``enable_tiling()`` with no arguments first: diffusers' default tile sizes of that
class, as the hand-built path's ``tiled`` (runtime/pipelines/vae.py). ``parallel`` (planned where the
family's VAE decodes exactly by row bands, ``Family.vae_parallel``): every rank of the leader's
sequence group (cfg rank 0) runs the pipeline to its end (``output_type="np"``) with the VAE
replaced by :func:`.vae_parallel.decode.row_parallel_vae`'s copy, whose decoder takes this rank's band of
the latent's rows and returns the whole decoded tensor (gathered over the group), so the pipeline's
own decode tail (latent un-normalisation and unpacking, the VAE's ``decode``, the image/video
processor) runs unchanged around it; only the leader writes. The leader writes one PNG/MP4 per
prompt through :mod:`.media` and returns the same result rows as the hand-built generate.

The plan's options apply as on the generic verify/benchmark: ``model.lora`` merged into the
transformer at load (:func:`load_pipeline`), its parameters sharded (``parallel.shard_weights``) or
quantised (``model.quant``) as the plan places them, its blocks compiled by the caller's
``compile_model`` (runtime/workloads.py: ``workload.compile``'s rule), and ``workload.cache``
(fbcache) applied with :func:`sporch.runtime.model.generic.cache.apply_step_cache`, whose
decision is agreed over the replica (over each cfg rank's sequence group where the two calls are
split: each cfg rank's cache holds the one context it computes, and the records are shared over the
cfg group after each prompt); the pipelines open the cache contexts themselves.

A USR2 stop is agreed over the replica at a step boundary (the pipeline's step callback:
``callback_on_step_end``, or the older ``callback`` where a pipeline has only that,
:func:`step_end_arguments`); each rank's
step file (:mod:`.resume`'s format) lets the requeued run resume the prompt from that step through
the same pipeline call (:mod:`.generic_resume`: the finished steps' transformer calls skipped, the
latents and scheduler state put back at the boundary), where the folder's scheduler is one checked
exact; otherwise the prompt restarts. A prompt an earlier run of the same plan finished (its file
written and recorded, :class:`.generic_resume.FinishedPrompts`) is not denoised again: its recorded
result row is listed (``reused_outputs``).
"""

from __future__ import annotations

import contextlib
import inspect
import time
from pathlib import Path
from typing import Any, Callable, Mapping, Sequence

import numpy as np
import torch

from sporch.orchestrator.models.families import Family, PipelineCfg, get_family
from sporch.orchestrator.contract.plan import Plan
from sporch.runtime.measure import peak_memory_bytes, sync
from sporch.runtime.model import resolve_dtype
from sporch.runtime.model.finite import check_output
from sporch.runtime.model.cache.decision import REDUCED_OVER
from sporch.runtime.model.generic.cache import apply_step_cache
from sporch.runtime.model.generic.cfg_parallel import CfgParallel
from sporch.runtime.model.generic.cfg_two_calls import CfgTwoCalls, share_over_cfg
from sporch.runtime.model.generic.families import family_module
from sporch.runtime.model.generic.placed import build_transformer
from sporch.runtime.model.generic.plans import split_plan
from sporch.runtime.model.generic.sequence_parallel import SequenceParallel
from sporch.runtime.model.shard_weights import resident_parameter_bytes
from sporch.runtime.model.sharded import replica_rows
from sporch.runtime.parallel import ParallelContext
from sporch.runtime.progress import Progress, RequeueRequested, requeue_self

from .generic_resume import FinishedPrompts, SkipTransformer, resume_refusal
from .media import output_name, write
from .replica import is_leader, share_from_leader
from .text import encoder_peak, shard_text_encoders
from .params import GenerateParams, generate_params
from .phase_timing import PhaseTimer
from .resume import DenoiseCheckpoint, plan_key, restore_scheduler
from .vae_parallel.decode import row_parallel_vae

__all__ = ["load_pipeline", "encode", "pipeline_arguments", "run_generic_generate", "step_end_arguments"]

def _is_text_part(name: str) -> bool:
    """A pipeline component only prompt encoding needs (text encoders, tokenizers)."""
    return name.startswith(("text_encoder", "tokenizer"))


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
    skip = {} if text else {name: None for name in _components(spec.root) if _is_text_part(name)}
    pipe = cls.from_pretrained(spec.root, transformer=transformer, dtype=dtype, **skip)
    pipe.set_progress_bar_config(disable=True)
    for name, part in pipe.components.items():  # each part straight to where it runs
        if isinstance(part, torch.nn.Module) and part is not transformer:  # built on ``device`` (maybe sharded)
            part.to(text_device if (_is_text_part(name) and text_device is not None) else device)
    return pipe


def _components(root: str) -> list[str]:
    import json

    index = json.loads((Path(root) / "model_index.json").read_text(encoding="utf-8"))
    return [k for k, v in index.items() if not k.startswith("_") and isinstance(v, list)]


def encode(pipe, spec: GenerateParams, family: Family, prompt: str, device: torch.device) -> dict[str, Any]:
    """The prompt (and, with CFG, the negative prompt) encoded by the pipeline's own
    ``encode_prompt`` as its call would encode them (the family module's ``encode``): the call's
    embedding arguments, on the CPU."""
    out = family_module(family.name).encode(pipe, prompt, negative=spec.negative_prompt, cfg=spec.cfg,
                                            text_len=spec.text_len, device=device)
    return {k: (v.cpu() if torch.is_tensor(v) else v) for k, v in out.items()}


def pipeline_arguments(spec: GenerateParams, family: Family, seed: int) -> dict[str, Any]:
    """The keyword arguments of the pipeline's call besides the prompt's embeddings (the same a
    user would pass to diffusers to get the same output): size, frames, steps, the prompt's
    generator, and the family module's ``call_arguments`` (guidance; CFG off, ``spec.cfg`` False,
    runs one pass per step)."""
    kw: dict[str, Any] = dict(height=spec.height, width=spec.width, num_inference_steps=spec.steps,
                              generator=torch.Generator().manual_seed(seed))
    if spec.video:
        kw["num_frames"] = spec.frames
    kw.update(family_module(family.name).call_arguments(guidance_scale=spec.guidance_scale, cfg=spec.cfg,
                                                        text_len=spec.text_len))
    return kw


def step_end_arguments(pipe, on_step: Callable[[Any, int, Any, dict], dict]) -> dict[str, Any]:
    """The pipeline call's arguments that run ``on_step`` after every scheduler step (diffusers'
    ``callback_on_step_end(pipe, i, t, kwargs) -> dict``, its returned ``latents`` replacing the
    loop's): that argument where ``pipe``'s ``__call__`` takes it; else diffusers' older
    ``callback(step, t, latents)`` with ``callback_steps=1`` (PixArt's pipelines have only that one,
    and their ``**kwargs`` would swallow ``callback_on_step_end`` unused), ``on_step`` given
    ``{"latents": latents}`` and any latents it returns copied into the loop's tensor in place (the
    older API returns nothing); a ValueError, one line, for a call with neither."""
    params = inspect.signature(type(pipe).__call__).parameters
    if "callback_on_step_end" in params:
        return {"callback_on_step_end": on_step}
    if "callback" not in params or "callback_steps" not in params:
        raise ValueError(f"{type(pipe).__name__}'s call takes no step callback (callback_on_step_end or "
                         "callback/callback_steps): sporch cannot time, stop or resume its steps")

    def legacy(step: int, t, latents: torch.Tensor) -> None:
        new = on_step(pipe, step, t, {"latents": latents}) or {}
        if new.get("latents") is not None:
            latents.copy_(new["latents"])

    return {"callback": legacy, "callback_steps": 1}


def _reset_step_cache(transformer: torch.nn.Module) -> None:
    """A new denoising run: every stateful diffusers hook of ``transformer`` (the step cache's
    residuals, step counts and records) back to its start."""
    from diffusers.hooks import HookRegistry

    HookRegistry.check_if_exists_or_initialize(transformer).reset_stateful_hooks(recurse=True)


def _frames(out, video: bool) -> np.ndarray:
    """[B, F, H, W, 3] float frames in [0, 1] from a pipeline output with ``output_type="np"``."""
    if video:
        return np.asarray(out.frames, dtype=np.float32)
    return np.asarray(out.images, dtype=np.float32)[:, None]


def _cfg_split(family: Family, ctx: ParallelContext | None, shard_weights: str) -> PipelineCfg | None:
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


def _tiled_decode(family: Family, vae: str) -> bool:
    """Whether the leader decodes in tiles (``plan.placement.vae``); a placement the generic
    generate does not run is refused at plan time (a hand-edited plan gets one line here)."""
    if vae == "leader" or (vae == "tiled" and family.vae_tiling) or (vae == "parallel" and family.vae_parallel):
        return vae == "tiled"
    built = ["leader"] + ["parallel"] * family.vae_parallel + ["tiled"] * family.vae_tiling
    raise ValueError(f"pipeline.vae={vae} is not built for generate on family {family.name} (the generic path): "
                     f"plan with pipeline.vae={' or '.join(built)}")


def _parallel_decode(vae: str, ctx: ParallelContext | None) -> bool:
    """Whether this rank decodes its band of rows (``pipeline.vae: parallel``): every rank of the
    leader's sequence group (cfg rank 0 of the replica), where the group has more than one rank."""
    return vae == "parallel" and ctx is not None and ctx.sequence_size > 1 and ctx.cfg_rank == 0


def _attach(transformer: torch.nn.Module, ctx: ParallelContext | None, family: Family, split: PipelineCfg | None):
    """The hooks that run ``transformer`` over ``ctx``: sequence-parallel over the sequence group
    (a group of more than one rank), then (inside it) CFG-parallel over the cfg group as ``split``
    says: the family module's ``BATCHED`` arguments' rows (``batched``) or the two calls
    (``two_calls``)."""
    with contextlib.ExitStack() as stack:
        if ctx is not None and ctx.sequence_size > 1:
            stack.enter_context(SequenceParallel(transformer, ctx, split_plan(type(transformer)),
                                                 local_attention=family.local_attention))
        if split is PipelineCfg.BATCHED:
            stack.enter_context(CfgParallel(transformer, ctx, tuple(family_module(family.name).BATCHED)))
        elif split is PipelineCfg.TWO_CALLS:
            stack.enter_context(CfgTwoCalls(transformer, ctx))
        return stack.pop_all()


def run_generic_generate(plan: Plan, ctx: ParallelContext | None, device: torch.device, output_dir: Path,
                         log: Callable[[ParallelContext | None, str], None] | None = None,
                         frames_sink: Callable[[int, Any], None] | None = None,
                         compile_model: Callable[[torch.nn.Module], Any] | None = None,
                         progress: Progress | None = None) -> dict[str, Any]:
    """Run the generate workload of a generic-path ``plan`` on this rank (see the module docstring);
    ``frames_sink(index, frames)`` (tests) also receives each prompt's float frames [F, H, W, 3] on
    the leader. ``compile_model(transformer)``: compiles the transformer's blocks where the plan
    says so (runtime/workloads.py, the rule verify/benchmark follow) and returns the
    ``CompileInfo``; None: eager. The first denoising step includes the compiling
    (``compile.first_call_s``). ``progress`` carries the USR2 stop request: it is agreed over the
    replica at a step boundary, each rank's step file of that step is kept (:mod:`.generic_resume`)
    and :class:`RequeueRequested` raised; a requeued run resumes the prompt from that step."""
    spec = generate_params(plan)
    family = get_family(plan.model.family)
    class_name = family.pipeline_class
    if not class_name:  # the planner refuses this; a hand-edited plan gets one line
        raise ValueError(f"family {family.name} has no generic generate pipeline")
    split = _cfg_split(family, ctx, plan.placement.shard_weights)
    tiled = _tiled_decode(family, plan.placement.vae)
    say = log or (lambda c, m: print(m, flush=True) if is_leader(c) else None)
    mine = replica_rows(len(spec.prompts), ctx)
    leader = is_leader(ctx)
    # pipeline.text_encoder: sharded: every rank of the sequence group encodes (one rank: the leader alone)
    sharded = spec.text_encoder == "sharded" and ctx is not None and ctx.sequence_size > 1
    parallel = _parallel_decode(plan.placement.vae, ctx)
    decodes = leader or parallel  # this rank runs the pipeline's decode tail
    roles = [r for r, on in (("text_encoder", leader or sharded), ("vae", decodes)) if on]
    out: dict[str, Any] = {"kind": "generate", "path": "generic", "family": family.name,
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
    if len(reused) == len(mine):  # nothing left: neither the pipeline nor the encoders are loaded
        out.update(outputs=[reused[i] for i in mine] if leader else [], denoised_prompts=0, step_ms=[], resumed={},
                   roles=[], peak_memory_bytes=peak_memory_bytes(device))
        return out
    stages = PhaseTimer(device)
    text_device = torch.device("cpu") if spec.text_encoder == "cpu" else device
    with stages("load"):
        pipe = load_pipeline(spec, class_name, device, text=leader or sharded,
                             text_device=torch.device("cpu") if sharded else text_device, lora=plan.model.lora,
                             ctx=ctx, shard_weights=plan.placement.shard_weights, quant=plan.model.quant)
        if sharded:
            shard_text_encoders(pipe, ctx, device)
    if tiled and leader:  # diffusers' tiled decode, the class's default tile sizes
        pipe.vae.enable_tiling()
    if parallel:  # the VAE's decoder on this rank's rows, the whole output gathered (every rank of the group)
        pipe.vae = row_parallel_vae(pipe.vae, ctx.sequence_group)
    out.update(shard_weights=plan.placement.shard_weights, quant=plan.model.quant or "none", vae=plan.placement.vae,
               resident_parameter_bytes=resident_parameter_bytes(pipe.transformer), text_encoder=spec.text_encoder)
    encoders = [part for name, part in pipe.components.items() if _is_text_part(name) and isinstance(part, torch.nn.Module)]
    if encoders:  # what this rank holds of the text encoders (sharded: its shards) against their whole size
        out.update(text_encoder_resident_bytes=sum(resident_parameter_bytes(e) for e in encoders),
                   text_encoder_bytes=sum(p.numel() * p.element_size() for e in encoders for p in e.parameters()))
    compiled = compile_model(pipe.transformer) if compile_model is not None else None
    # workload.cache: diffusers' First Block Cache, its decision agreed over the replica (generic/cache.py); the
    # pipelines open the cache contexts themselves ("cond"/"uncond", "cond_uncond"); reset before each prompt.
    # With the two calls split each cfg rank computes one context: agreed over its sequence group only
    two_calls = split is PipelineCfg.TWO_CALLS
    head_hook = apply_step_cache(pipe.transformer, plan.workload.cache, ctx, num_steps=spec.steps,
                                 groups=("sequence",) if two_calls else REDUCED_OVER)
    step_cache: list[dict[str, Any]] = []
    prompts = [spec.prompts[i] for i in mine if i not in reused]

    def encode_all():
        with stages("encode"), torch.no_grad(), encoder_peak(encoders) as peak:
            got = [encode(pipe, spec, family, p, text_device) for p in prompts]
        out["text_encoder_peak_bytes"] = peak.bytes  # the encoders' parameters held at the busiest moment
        return got

    if sharded:  # the whole sequence group encodes with the sharded encoders: the same embeddings on every rank
        with ctx.guard():
            embeds = iter(encode_all())  # in the order of ``prompts``
    else:
        embeds = iter(share_from_leader(ctx, encode_all, "encoding the prompts"))
    if leader or sharded:  # the text encoders are done: freed before the transformer runs
        encoders.clear()
        for name in list(pipe.components):
            if _is_text_part(name):
                setattr(pipe, name, None)
        say(ctx, f"encoded {len(prompts)} prompt(s) in {stages.seconds('encode'):.1f} s")
    step_ms: list[float] = []
    outputs: list[dict[str, Any]] = []
    ckpt = DenoiseCheckpoint(output_dir, ctx, (lambda: progress.stop_requested) if progress is not None
                             else (lambda: False), key=plan_key(plan))
    refusal = resume_refusal(pipe.scheduler, head_hook is not None)  # the same on every rank: same folder, plan
    if refusal is not None:
        say(ctx, f"a requeued prompt restarts its denoising: {refusal}")
    resumed: dict[str, int] = {}
    for k, index in enumerate(mine):
        if index in reused:  # its row as the run that wrote it recorded it
            if leader:
                outputs.append(reused[index])
            continue
        cache_now: dict[str, Any] = {}
        if head_hook is not None:
            _reset_step_cache(pipe.transformer)
        seed = spec.seed + index
        clock = {"t": time.perf_counter()}
        start = len(step_ms)
        got = ckpt.resume(k, device) if refusal is None else None  # collective over the replica
        done, saved = got if got is not None else (0, None)
        prompt_ms: list[float] = list(saved["step_ms"]) if saved is not None else []
        skip = SkipTransformer(pipe.transformer)
        attached = contextlib.ExitStack()
        if done:
            resumed[str(k)] = done
            say(ctx, f"prompt {k + 1}/{len(mine)}: resuming after step {done}/{spec.steps} (requeued)")

        def on_step(p, i, t, kwargs):  # diffusers' callback_on_step_end: after each scheduler step
            if i + 1 < done:  # a finished step replayed: its transformer call was skipped
                return {}
            if i + 1 == done:  # the boundary: the saved step's scheduler state and latents
                restore_scheduler(p.scheduler, saved["scheduler"], device)
                skip.detach()
                attached.enter_context(_attach(pipe.transformer, ctx, family, split))
                clock["t"] = clock["last_step"] = time.perf_counter()
                return {"latents": saved["x"].to(dtype=kwargs["latents"].dtype)}
            sync(device)
            now = time.perf_counter()
            step_ms.append((now - clock["t"]) * 1e3)
            clock["t"] = clock["last_step"] = now
            say(ctx, f"prompt {k + 1}/{len(mine)} step {i + 1}/{spec.steps}  {step_ms[-1] / 1e3:.2f} s/step")
            if head_hook is not None:  # read now: the pipeline resets its stateful hooks when the call ends
                cache_now.update({name: rec.record() for name, rec in head_hook.records.items()})
            prompt_ms.append(step_ms[-1])
            if refusal is None:
                ckpt.save(k, i + 1, kwargs["latents"], p.scheduler, prompt_ms)
            if i + 1 < spec.steps and ckpt.stop_agreed():
                if leader:
                    requeue_self()
                raise RequeueRequested(f"stopped after step {i + 1}/{spec.steps} of prompt {k + 1}/{len(mine)} on "
                                       "USR2; " + ("the step is kept" if refusal is None else "the prompt restarts")
                                       + " and the job requeued")
            return {}

        def first_call(module, args, kwargs):  # the first step starts at the first transformer call
            if not step_ms[start:]:
                clock["t"] = time.perf_counter()

        kw = {**pipeline_arguments(spec, family, seed),
              **{n: (v.to(device) if torch.is_tensor(v) else v) for n, v in next(embeds).items()}}
        handle = pipe.transformer.register_forward_pre_hook(first_call, with_kwargs=True)
        try:
            with torch.no_grad(), attached, skip if done else contextlib.nullcontext():
                if not done:
                    attached.enter_context(_attach(pipe.transformer, ctx, family, split))
                sync(device)
                began = clock["last_step"] = time.perf_counter()
                result = pipe(**kw, output_type="np" if decodes else "latent", **step_end_arguments(pipe, on_step))
                sync(device)
                ended = time.perf_counter()
        finally:
            handle.remove()
        ckpt.finish(k)  # the prompt is denoised: its step files are not needed any more
        if head_hook is not None:  # this prompt's steps computed / skipped, per cache context
            step_cache.append({"index": index, **(share_over_cfg(cache_now, ctx) if two_calls else cache_now)})
        # denoise: the call up to its last step; decode: the rest (the leader's VAE and post-processing)
        stages.add("denoise", clock["last_step"] - began)
        if decodes:
            stages.add("decode", ended - clock["last_step"])
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
        finished.record(outputs[-1], path)  # after the file: a requeued run skips this prompt
        say(ctx, f"wrote {path}")
        if frames_sink is not None:
            frames_sink(index, frames[0])
    if compiled is not None and compiled.enabled and step_ms:  # the first step compiled the blocks
        compiled.first_call_s = step_ms[0] / 1e3
    steady = sorted(step_ms[1:])
    if head_hook is not None:
        out["step_cache"] = step_cache
    out.update(lora_adapters=len(plan.model.lora or []),
               compile=compiled.record(steady[len(steady) // 2] / 1e3 if steady else None) if compiled else None)
    out.update(step_ms=step_ms, outputs=outputs, resumed=resumed, stages=stages.record(steps=len(step_ms)),
               encode_s=stages.seconds("encode"),
               denoised_prompts=len(mine) - len(reused),
               parameters=sum(p.numel() for p in pipe.transformer.parameters()),
               peak_memory_bytes=peak_memory_bytes(device))
    return out
