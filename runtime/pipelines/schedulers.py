"""The job's scheduler options on the family's diffusers pipeline: ``workload.scheduler``,
``workload.shift`` and ``workload.sigmas`` (docs/generate.md, "Schedulers and few-step recipes").

* ``workload.scheduler`` (``unipc`` | ``euler``) swaps the folder's scheduler class keeping its
  config: UniPC in flow mode (``use_flow_sigmas``, ``flow_prediction``, its ``flow_shift`` from the
  Euler config's ``shift``), or the flow-matching Euler (its ``shift`` from UniPC's ``flow_shift``);
* ``workload.shift`` sets UniPC's ``flow_shift`` or Euler's fixed ``shift`` (a resolution-dependent
  shift, ``use_dynamic_shifting``, is replaced by it);
* ``workload.sigmas`` (a few-step recipe's steps before the shift, with ``workload.scheduler:
  euler``): passed to the pipeline's call where it takes ``sigmas`` (FluxPipeline); else the
  pipeline's scheduler is :func:`recipe_scheduler`'s, a flow-matching Euler scheduler whose
  ``set_timesteps(steps)`` (what WanPipeline calls) takes the recipe's sigmas, shifted as the
  scheduler shifts any.

Every rank applies the same options to its own copy (the schedulers' steps are elementwise on
the whole latents every rank holds), so no step needs communication.
"""

from __future__ import annotations

import functools
import inspect
from typing import Any

from sporch.runtime.pipelines.params import GenerateParams

__all__ = ["apply_scheduler_options", "call_takes_sigmas", "recipe_scheduler"]

UNIPC, EULER = "UniPCMultistepScheduler", "FlowMatchEulerDiscreteScheduler"


def call_takes_sigmas(pipe: Any) -> bool:
    """Whether the pipeline's call takes the steps' sigmas itself (FluxPipeline, Qwen-Image)."""
    return "sigmas" in inspect.signature(type(pipe).__call__).parameters


def apply_scheduler_options(pipe: Any, spec: GenerateParams) -> None:
    """Give ``pipe`` the scheduler ``spec`` asks for (module docstring); nothing without options."""
    if spec.scheduler is None and spec.shift is None and spec.sigmas is None:
        return
    import diffusers

    config = dict(pipe.scheduler.config)
    name = type(pipe.scheduler).__name__
    if spec.scheduler == "unipc" and name != UNIPC:
        name = UNIPC
        config = {**config, "prediction_type": "flow_prediction", "use_flow_sigmas": True,
                  "flow_shift": config.get("shift", 1.0)}
    elif spec.scheduler == "euler" and name != EULER:
        name = EULER
        config = {**config, "shift": config.get("flow_shift", 1.0)}
    if name not in (UNIPC, EULER):
        raise ValueError(f"workload.scheduler / shift / sigmas set a flow-matching scheduler, but {spec.root}'s is "
                         f"{name}; remove them")
    if spec.shift is not None:
        config.update({"flow_shift": spec.shift} if name == UNIPC else {"shift": spec.shift,
                                                                      "use_dynamic_shifting": False})
    cls = getattr(diffusers, name)
    if spec.sigmas is not None and not call_takes_sigmas(pipe):
        if name != EULER:
            raise ValueError("workload.sigmas sets the flow-matching Euler scheduler's sigmas: add "
                             "workload.scheduler=euler")
        cls = recipe_scheduler()
        config["recipe_sigmas"] = [float(s) for s in spec.sigmas]
    pipe.scheduler = cls.from_config(config)


@functools.lru_cache(maxsize=None)
def recipe_scheduler() -> type:
    """diffusers' flow-matching Euler scheduler whose ``set_timesteps(num_inference_steps)`` uses the
    configured ``recipe_sigmas`` (built on first use: diffusers is imported only where it runs)."""
    from diffusers import FlowMatchEulerDiscreteScheduler
    from diffusers.configuration_utils import register_to_config

    def init(self, recipe_sigmas: list | None = None, **kwargs) -> None:
        FlowMatchEulerDiscreteScheduler.__init__(self, **kwargs)

    # the parent's arguments by name (diffusers' config reads the constructor's signature: with **kwargs
    # alone its keys, shift among them, would be dropped as unexpected)
    theirs = list(inspect.signature(FlowMatchEulerDiscreteScheduler.__init__).parameters.values())
    ours = inspect.Parameter("recipe_sigmas", inspect.Parameter.KEYWORD_ONLY, default=None)
    init.__signature__ = inspect.Signature([theirs[0], *[p.replace(kind=inspect.Parameter.KEYWORD_ONLY)
                                                             for p in theirs[1:]], ours])

    class RecipeSigmasScheduler(FlowMatchEulerDiscreteScheduler):
        """A few-step recipe's sigmas (before the shift) for a pipeline that sets the steps by count."""

        __init__ = register_to_config(init)

        def set_timesteps(self, num_inference_steps=None, device=None, sigmas=None, mu=None, timesteps=None):
            if sigmas is None and timesteps is None and self.config.recipe_sigmas is not None:
                sigmas = list(self.config.recipe_sigmas)
                if num_inference_steps is not None and num_inference_steps != len(sigmas):
                    raise ValueError(f"the pipeline asks for {num_inference_steps} steps, the recipe gives "
                                     f"{len(sigmas)} sigmas")
            return super().set_timesteps(num_inference_steps, device, sigmas=sigmas, mu=mu, timesteps=timesteps)

    return RecipeSigmasScheduler
