"""The scheduler and its timesteps, set up the way the diffusers pipelines do.

* Wan2.1 (WanPipeline): the folder's scheduler (Wan2.1-Diffusers ships UniPCMultistep with
  flow prediction and ``flow_shift``), ``set_timesteps(steps)``.
* Flux.1 (FluxPipeline): FlowMatchEulerDiscrete with sigmas ``linspace(1, 1/steps, steps)``
  and the resolution-dependent shift ``mu = calculate_shift(image tokens, ...)`` from the
  scheduler config (``use_dynamic_shifting``).

Job overrides: ``workload.scheduler`` (``unipc`` | ``euler``) swaps the class keeping the
folder's config; ``workload.shift`` sets Wan's ``flow_shift`` or replaces Flux's dynamic mu
with a fixed shift. Every rank of a sequence group runs its own copy on its own token shard
(both schedulers' steps are elementwise), so no step needs communication.
"""

from __future__ import annotations

from typing import Any

import torch

from .families import pipeline_family
from .params import GenerateParams


def load_scheduler(params: GenerateParams):
    import diffusers

    config = dict(diffusers.FlowMatchEulerDiscreteScheduler.load_config(params.root, subfolder="scheduler"))
    name = config.get("_class_name", "FlowMatchEulerDiscreteScheduler")
    if params.scheduler == "unipc":
        name = "UniPCMultistepScheduler"
        if config.get("_class_name") != name:  # a flow-matching config: UniPC in flow mode
            config = {**config, "prediction_type": "flow_prediction", "use_flow_sigmas": True,
                      "flow_shift": config.get("shift", 1.0)}
    elif params.scheduler == "euler":
        name = "FlowMatchEulerDiscreteScheduler"
        if config.get("_class_name") != name:
            config = {**config, "shift": config.get("flow_shift", 1.0)}
    cls = getattr(diffusers, name, None)
    if cls is None:
        raise ValueError(f"scheduler class {name!r} of {params.root}/scheduler is not in diffusers {diffusers.__version__}")
    overrides: dict[str, Any] = {}
    if params.shift is not None:
        if name == "UniPCMultistepScheduler":
            overrides = {"flow_shift": params.shift}
        else:
            overrides = pipeline_family(params.family).euler_shift(params.shift)
    return cls.from_config(config, **overrides)


def timesteps(params: GenerateParams, scheduler, image_tokens: int, device: torch.device) -> torch.Tensor:
    """Set the scheduler's timesteps for ``params.steps`` steps; returns them (model units)."""
    out = pipeline_family(params.family).timesteps(params, scheduler, image_tokens, device)
    scheduler.set_begin_index(0)
    return out
