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

from .spec import GenerateSpec


def load_scheduler(spec: GenerateSpec):
    import diffusers

    config = dict(diffusers.FlowMatchEulerDiscreteScheduler.load_config(spec.root, subfolder="scheduler"))
    name = config.get("_class_name", "FlowMatchEulerDiscreteScheduler")
    if spec.scheduler == "unipc":
        name = "UniPCMultistepScheduler"
        if config.get("_class_name") != name:  # a flow-matching config: UniPC in flow mode
            config = {**config, "prediction_type": "flow_prediction", "use_flow_sigmas": True,
                      "flow_shift": config.get("shift", 1.0)}
    elif spec.scheduler == "euler":
        name = "FlowMatchEulerDiscreteScheduler"
        if config.get("_class_name") != name:
            config = {**config, "shift": config.get("flow_shift", 1.0)}
    cls = getattr(diffusers, name, None)
    if cls is None:
        raise ValueError(f"scheduler class {name!r} of {spec.root}/scheduler is not in diffusers {diffusers.__version__}")
    overrides: dict[str, Any] = {}
    if spec.shift is not None:
        if name == "UniPCMultistepScheduler":
            overrides = {"flow_shift": spec.shift}
        elif spec.family == "wan":
            overrides = {"shift": spec.shift}
        else:
            overrides = {"shift": spec.shift, "use_dynamic_shifting": False}
    return cls.from_config(config, **overrides)


def timesteps(spec: GenerateSpec, scheduler, image_tokens: int, device: torch.device) -> torch.Tensor:
    """Set the scheduler's timesteps for ``spec.steps`` steps; returns them (model units)."""
    if spec.family == "wan":
        if spec.sigmas is not None:  # workload.sigmas (euler): the recipe's list, shifted by the scheduler
            scheduler.set_timesteps(sigmas=list(spec.sigmas), device=device)
        else:
            scheduler.set_timesteps(spec.steps, device=device)
        out = scheduler.timesteps
    else:
        import numpy as np
        from diffusers.pipelines.flux.pipeline_flux import calculate_shift, retrieve_timesteps

        cfg = scheduler.config
        sigmas = None if cfg.get("use_flow_sigmas") else np.linspace(1.0, 1 / spec.steps, spec.steps)
        if spec.sigmas is not None:
            sigmas = np.array(spec.sigmas)
        mu = calculate_shift(image_tokens, cfg.get("base_image_seq_len", 256), cfg.get("max_image_seq_len", 4096),
                             cfg.get("base_shift", 0.5), cfg.get("max_shift", 1.15))
        out, _ = retrieve_timesteps(scheduler, spec.steps, device, sigmas=sigmas, mu=mu)
    scheduler.set_begin_index(0)
    return out
