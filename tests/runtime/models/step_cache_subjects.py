"""The tiny denoising runs the generic step-cache tests and bench/step_cache_generic.py cache: one
per family of ``orchestrator/models/families`` (and a two-expert Wan2.2-style run), float32, CPU.

* A family whose runtime module has ``tiny_pipeline`` runs its diffusers pipeline as the generic
  generate calls it (the prompt's embeddings from the family's ``encode``, its call arguments,
  ``output_type="latent"`` or ``"np"``), the transformer sequence-parallel over ``ctx``
  (``placement.attach_hooks``): its own cache contexts ("cond"/"uncond", "cond_uncond", or
  none: the default one).
* Any other family (Wan, Flux today) runs a direct flow-matching Euler loop on a tiny config of its
  class (``TINY``) with random inputs (``inputs``): each step's transformer call(s) in
  ``cache_context("cond")`` (and ``("uncond")`` with CFG, combined at scale 4) with the step index,
  as WanPipeline calls it. ``wan2.2``: the same loop with two Wan experts (other seeds), the second
  taking over at step ``STEPS // 2`` (WanPipeline's ``transformer_2`` at its boundary).

:func:`run_cached` applies a ``workload.cache`` section to the subject's transformers
(``apply_step_cache``), runs it and returns the output and each context's record, read after the
last step (the pipelines reset their stateful hooks when the call ends).
"""

from __future__ import annotations

import contextlib
import math
from dataclasses import dataclass
from typing import Any, Callable

import torch

from sporch.orchestrator.contract.sections import CacheSection
from sporch.orchestrator.models.families import Family, PipelineCfg, get_family
from sporch.runtime.models.cache.decision import REDUCED_OVER
from sporch.runtime.models.build import random_diffusers
from sporch.runtime.models.cache.apply import apply_step_cache, remove_step_cache
from sporch.runtime.models.families import family_module
from sporch.runtime.pipelines.denoise import step_end_arguments
from sporch.runtime.pipelines.placement import attach_hooks

STEPS = 6
SEED = 5
PROMPT, NEGATIVE, GUIDANCE = "a red fox running in snow", "blurry low quality", 4.0
#: pipeline size: (height, width, frames or None); LTX-Video's VAE folds 32 x 32 pixels per latent
SIZE = {"ltx-video": (64, 96, 9), "cogvideox": (64, 48, 9), "hunyuanvideo": (64, 48, 9)}
#: a direct loop's token grid (frames, rows, columns) and text tokens
GRID, TEXT = (2, 4, 4), 5
#: a direct loop's timestep scale: Flux takes sigmas, Wan timesteps in [0, 1000]
TIME_SCALE = {"flux": 1.0}
#: the step at which the two-expert run's second expert takes over (half the steps)
SWITCH = STEPS // 2


@dataclass
class Subject:
    """A tiny run: its name (a family, or ``wan2.2``), family, transformers (the experts in turn),
    and ``run(ctx, on_step, decode)`` -> the output (latents; decoded frames with ``decode`` where
    it has a pipeline)."""

    name: str
    family: Family
    transformers: list[torch.nn.Module]
    run: Callable[..., torch.Tensor]
    pipeline: bool
    steps: int


def subject_names() -> list[str]:
    """The families whose classes take the step caches (the others refuse them in one line:
    test_generic_cache_facts.py), and Wan2.2's two experts."""
    from sporch.orchestrator.models.families import FAMILIES

    return [f.name for f in FAMILIES if f.step_cache] + ["wan2.2"]


def make_subject(name: str, steps: int = STEPS) -> Subject:
    """The run ``name`` (a family, or ``wan2.2``) of ``steps`` denoising steps."""
    fam = "wan" if name == "wan2.2" else name
    family, module = get_family(fam), family_module(fam)
    if hasattr(module, "tiny_pipeline") and name == fam:
        return _pipeline_subject(family, module, steps)
    return _loop_subject(name, family, module, steps)


def _pipeline_subject(family: Family, module: Any, steps: int) -> Subject:
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(0)
        pipe = module.tiny_pipeline(0)
    height, width, frames = SIZE.get(family.name, (64, 48, None))
    text_len = int(family.shape(dict(pipe.transformer.config))["text_len"])
    with torch.no_grad():
        embeds = module.encode(pipe, PROMPT, negative=NEGATIVE if family.cfg else None, cfg=family.cfg,
                               text_len=text_len, device=torch.device("cpu"))
    kw = dict(height=height, width=width, num_inference_steps=steps,
              **module.call_arguments(guidance_scale=GUIDANCE, cfg=family.cfg, text_len=text_len))
    if frames:
        kw["num_frames"] = frames

    def run(ctx, on_step=lambda i: None, decode: bool = False, split: PipelineCfg | None = None) -> torch.Tensor:
        def step_end(p, i, t, kwargs):
            on_step(i)
            return {}

        with torch.no_grad(), attach_hooks([pipe.transformer], ctx, family, split):
            out = pipe(**kw, **embeds, generator=torch.Generator().manual_seed(SEED),
                       output_type="np" if decode else "latent", **step_end_arguments(pipe, step_end))
        got = out.frames if family.video else out.images
        return torch.as_tensor(got).float()

    return Subject(family.name, family, [pipe.transformer], run, True, steps)


def _loop_subject(name: str, family: Family, module: Any, steps: int) -> Subject:
    config = dict(module.TINY)
    config["out_channels"] = config["in_channels"]  # a velocity of the latents' width
    experts = [random_diffusers(family.classes[0], config, seed=3 + 7 * k) for k in range(2 if name == "wan2.2" else 1)]
    inputs = module.inputs(config, batch=1, grid=GRID, text_len=TEXT, generator=torch.Generator().manual_seed(SEED))
    negative = torch.randn(inputs["encoder_hidden_states"].shape, generator=torch.Generator().manual_seed(SEED + 1))
    sigmas = torch.linspace(1.0, 0.0, steps + 1)
    scale = TIME_SCALE.get(family.name, 1000.0)
    switch = steps // 2

    def run(ctx, on_step=lambda i: None, decode: bool = False, split: PipelineCfg | None = None) -> torch.Tensor:
        x = inputs["hidden_states"]
        with torch.no_grad(), contextlib.ExitStack() as stack:
            for m in experts:
                stack.enter_context(attach_hooks([m], ctx, family, None))
            for i in range(steps):
                model = experts[0] if len(experts) == 1 or i < switch else experts[1]
                kw = {**inputs, "hidden_states": x, "timestep": torch.full((1,), scale * float(sigmas[i]))}
                with model.cache_context("cond", step_index=i, num_inference_steps=steps):
                    v = model(**kw)[0]
                if family.cfg:
                    with model.cache_context("uncond", step_index=i, num_inference_steps=steps):
                        u = model(**{**kw, "encoder_hidden_states": negative})[0]
                    v = u + GUIDANCE * (v - u)
                x = x + (sigmas[i + 1] - sigmas[i]) * v
                on_step(i)
        return x

    return Subject(name, family, experts, run, False, steps)


def run_cached(subject: Subject, ctx, section: CacheSection | None, decode: bool = False,
               split: PipelineCfg | None = None) -> dict[str, Any]:
    """``subject`` run once with ``section`` (None: no cache; any earlier cache taken off), its CFG
    passes split over ``ctx``'s cfg group as ``split`` says (a pipeline subject):
    ``{"out": output, "records": {context: record}}`` (with the two calls split, this cfg rank's
    context only)."""
    for model in subject.transformers:  # a fresh start: no hooks of another method
        remove_step_cache(model)
    groups = ("sequence",) if split is PipelineCfg.TWO_CALLS else REDUCED_OVER
    hooks = (apply_step_cache(subject.transformers, section, ctx, num_steps=subject.steps, groups=groups)
             if section is not None else None)
    seen: dict[str, Any] = {}

    def on_step(i: int) -> None:
        if hooks is not None:
            seen.update({n: r.record() for n, r in hooks.records.items()})

    if hooks is not None:
        hooks.reset()
    out = subject.run(ctx, on_step, decode, split)
    return {"out": out, "records": seen}


def psnr(got: torch.Tensor, ref: torch.Tensor, peak: float | None = None) -> float:
    """PSNR (dB) of ``got`` against ``ref``: peak 1 for frames in [0, 1], else ``ref``'s largest |value|."""
    peak = float(ref.abs().max()) if peak is None else peak
    mse = float(((got.double() - ref.double()) ** 2).mean())
    return math.inf if mse == 0 else 10 * math.log10(peak * peak / mse)
