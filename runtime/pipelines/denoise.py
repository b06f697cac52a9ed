"""Each prompt's denoising on the one model path (runtime/pipelines/generate_run.py): one call of the
family's diffusers pipeline with the prompt's embeddings, its arguments (:func:`pipeline_arguments`)
and a step callback (:func:`step_end_arguments`) that times each step, keeps the rank's step file,
stops the run where a USR2 stop is agreed over the replica, and, for a prompt resumed from a step
file, puts the latents and scheduler state back at the saved boundary (:mod:`.resume`)."""

from __future__ import annotations

import contextlib
import inspect
import time
from dataclasses import dataclass
from typing import Any, Callable

import torch

from sporch.orchestrator.models.families import Family, PipelineCfg
from sporch.runtime.measure import sync
from sporch.runtime.models.families import family_module
from sporch.runtime.parallel import ParallelContext
from sporch.runtime.progress import RequeueRequested, requeue_self

from sporch.runtime.pipelines.expert_switch import ExpertSwitch
from sporch.runtime.pipelines.load import experts_of
from sporch.runtime.pipelines.placement import attach_hooks
from sporch.runtime.pipelines.resume import SkipTransformer
from sporch.runtime.pipelines.params import GenerateParams
from sporch.runtime.pipelines.prompts import on_device
from sporch.runtime.pipelines.step_checkpoint import DenoiseCheckpoint, restore_scheduler
from sporch.runtime.pipelines.schedulers import call_takes_sigmas

__all__ = ["pipeline_arguments", "step_end_arguments", "Denoised", "PromptDenoiser"]


def pipeline_arguments(spec: GenerateParams, family: Family, seed: int, pipe: Any = None,
                       image: Any = None) -> dict[str, Any]:
    """The keyword arguments of the pipeline's call besides the prompt's embeddings (the same a
    user would pass to diffusers to get the same output): size, frames, steps, the prompt's
    generator, the family module's ``call_arguments`` (guidance; CFG off, ``spec.cfg`` False,
    runs one pass per step), the low-noise expert's scale (``guidance_scale_2``), the first frame
    (``image``: ``workload.image``, read once) and a recipe's sigmas where the call takes them
    (``workload.sigmas``; else the scheduler holds them: :mod:`.schedulers`)."""
    kw: dict[str, Any] = dict(height=spec.height, width=spec.width, num_inference_steps=spec.steps,
                              generator=torch.Generator().manual_seed(seed))
    if spec.video:
        kw["num_frames"] = spec.frames
    kw.update(family_module(family.name).call_arguments(guidance_scale=spec.guidance_scale, cfg=spec.cfg,
                                                        text_len=spec.text_len))
    if spec.guidance_scale_2 is not None:
        kw["guidance_scale_2"] = spec.guidance_scale_2 if spec.cfg else 1.0
    if image is not None:
        kw["image"] = image
    if spec.sigmas is not None and pipe is not None and call_takes_sigmas(pipe):
        kw["sigmas"] = list(spec.sigmas)
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


@dataclass(frozen=True)
class Denoised:
    """One prompt's pipeline call: its output (frames, or latents on a rank that does not decode),
    the step cache's records per context read at its last step (empty without a cache), and when
    the call began, finished its last step and returned (``time.perf_counter``)."""

    result: Any
    cache: dict[str, Any]
    began: float
    last_step: float
    ended: float


class PromptDenoiser:
    """Denoises this rank's prompts one pipeline call each (:meth:`denoise`), with the transformer
    run over ``ctx`` as ``split`` says (:func:`~.placement.attach_hooks`). ``ckpt``: the
    rank's step files and the replica's agreement on stopping and resuming; ``refusal``: why a
    requeued prompt restarts instead (None: it resumes); ``head_hook``: the step cache
    (:class:`~sporch.runtime.models.cache.apply.StepCacheHooks`, reset before each prompt; None:
    no cache); ``decodes``: this rank runs the pipeline's decode tail; ``count``: the rank's prompts.
    ``step_ms`` (each denoised step's milliseconds, the run's prompts in order) and ``resumed``
    ({prompt's place among the rank's: the step it resumed after}) fill as prompts are denoised."""

    def __init__(self, pipe, spec: GenerateParams, family: Family, ctx: ParallelContext | None,
                 split: PipelineCfg | None, device: torch.device, ckpt: DenoiseCheckpoint, refusal: str | None,
                 head_hook: Any, *, decodes: bool, leader: bool, count: int,
                 say: Callable[[ParallelContext | None, str], None], image: Any = None,
                 keep_latents: Callable[[int, torch.Tensor], None] | None = None,
                 switch: ExpertSwitch | None = None) -> None:
        self.pipe, self.spec, self.family, self.ctx, self.split, self.device = pipe, spec, family, ctx, split, device
        self.ckpt, self.refusal, self.head_hook = ckpt, refusal, head_hook
        self.decodes, self.leader, self.count, self.say = decodes, leader, count, say
        self.image, self.keep_latents, self.switch = image, keep_latents, switch
        self.experts = experts_of(pipe)
        self.step_ms: list[float] = []
        self.resumed: dict[str, int] = {}

    def denoise(self, k: int, seed: int, embeds: dict[str, Any], index: int | None = None) -> Denoised:
        """Prompt ``k`` of this rank's (0-based; ``index``: among the job's prompts) from its
        embeddings (the pipeline call's embedding arguments), noise drawn from ``seed``: resumed from
        the replica's agreed step file where one is kept; :class:`RequeueRequested` where a stop is
        agreed after one of its steps. The final latents (before the decode) go to ``keep_latents``."""
        pipe, spec, ctx, device, say, ckpt = self.pipe, self.spec, self.ctx, self.device, self.say, self.ckpt
        step_ms, refusal, count = self.step_ms, self.refusal, self.count
        cache_now: dict[str, Any] = {}
        if self.head_hook is not None:  # a new denoising run: every expert's residuals, step counts and records
            self.head_hook.reset()
        clock = {"t": time.perf_counter()}
        start = len(step_ms)
        if self.switch is not None:
            self.switch.begin_prompt()
        got = ckpt.resume(k, device) if refusal is None else None  # collective over the replica
        done, saved = got if got is not None else (0, None)
        prompt_ms: list[float] = list(saved["step_ms"]) if saved is not None else []
        skip = SkipTransformer(self.experts)
        attached = contextlib.ExitStack()
        if done:
            self.resumed[str(k)] = done
            say(ctx, f"prompt {k + 1}/{count}: resuming after step {done}/{spec.steps} (requeued)")

        def on_step(p, i, t, kwargs):  # diffusers' callback_on_step_end: after each scheduler step
            if self.switch is not None:
                self.switch.step_done()
            if i + 1 < done:  # a finished step replayed: its transformer call was skipped
                return {}
            if i + 1 == done:  # the boundary: the saved step's scheduler state and latents
                restore_scheduler(p.scheduler, saved["scheduler"], device)
                skip.detach()
                attached.enter_context(attach_hooks(self.experts, ctx, self.family, self.split))
                clock["t"] = clock["last_step"] = time.perf_counter()
                return {"latents": saved["x"].to(dtype=kwargs["latents"].dtype)}
            sync(device)
            now = time.perf_counter()
            step_ms.append((now - clock["t"]) * 1e3)
            clock["t"] = clock["last_step"] = now
            say(ctx, f"prompt {k + 1}/{count} step {i + 1}/{spec.steps}  {step_ms[-1] / 1e3:.2f} s/step")
            if self.head_hook is not None:  # read now: the pipeline resets its stateful hooks when the call ends
                cache_now.update({name: rec.record() for name, rec in self.head_hook.records.items()})
            prompt_ms.append(step_ms[-1])
            if i + 1 == spec.steps and self.keep_latents is not None and index is not None:
                self.keep_latents(index, kwargs["latents"])  # before the pipeline decodes them
            if refusal is None:
                ckpt.save(k, i + 1, kwargs["latents"], p.scheduler, prompt_ms)
            if i + 1 < spec.steps and ckpt.stop_agreed():
                if self.leader:
                    requeue_self()
                raise RequeueRequested(f"stopped after step {i + 1}/{spec.steps} of prompt {k + 1}/{count} on "
                                       "USR2; " + ("the step is kept" if refusal is None else "the prompt restarts")
                                       + " and the job requeued")
            return {}

        def first_call(module, args, kwargs):  # the first step starts at the first transformer call
            if not step_ms[start:]:
                clock["t"] = time.perf_counter()

        given = {n: on_device(v, device) for n, v in embeds.items()}
        handed = getattr(family_module(self.family.name), "hand_embeddings", None)  # what the call cannot take
        kw = {**pipeline_arguments(spec, self.family, seed, pipe, self.image),
              **(handed(pipe, given) if handed is not None else given)}
        handle = pipe.transformer.register_forward_pre_hook(first_call, with_kwargs=True)
        try:
            with torch.no_grad(), attached, skip if done else contextlib.nullcontext():
                if not done:
                    attached.enter_context(attach_hooks(self.experts, ctx, self.family, self.split))
                sync(device)
                began = clock["last_step"] = time.perf_counter()
                result = pipe(**kw, output_type="np" if self.decodes else "latent", **step_end_arguments(pipe, on_step))
                sync(device)
                ended = time.perf_counter()
        finally:
            handle.remove()
        ckpt.finish(k)  # the prompt is denoised: its step files are not needed any more
        return Denoised(result=result, cache=cache_now, began=began, last_step=clock["last_step"], ended=ended)
