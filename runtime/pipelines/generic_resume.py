"""A requeue in the middle of a generic-path prompt (:mod:`.generic`): resumed from the last
finished step through the diffusers pipeline's own call, not a copy of its loop.

After every denoising step the pipeline's ``callback_on_step_end`` hands sporch the latents; each
rank writes them and its scheduler's state into the step files of :mod:`.resume` (same format,
same replica-wide agreement on the step to resume from). A requeued run calls the pipeline again
with the same arguments; while the finished steps replay, :class:`SkipTransformer` (a diffusers
``ModelHook`` on the transformer) returns a placeholder instead of computing, the sequence- and
CFG-parallel hooks are not attached yet, and the pipeline's scheduler steps on that placeholder
(harmless: at the boundary step the callback puts the saved scheduler state back over it and
returns the saved latents, which the pipeline takes as its own). From there the steps are the
uninterrupted run's.

That is exact only where the pipeline's loop keeps no state of its own between steps besides the
latents and the scheduler object: :data:`RESUMABLE_SCHEDULERS` lists the scheduler classes checked
(tests/runtime/pipelines/test_generate_generic_resume.py). CogVideoXPipeline with
``CogVideoXDPMScheduler`` carries ``old_pred_original_sample`` in a local variable of its loop that
no callback sees, and the step cache (``workload.cache``) keeps residuals in its hooks: for those
:func:`resume_refusal` says why, no step files are written and a requeued prompt restarts.
"""

from __future__ import annotations

from typing import Any

import torch

__all__ = ["RESUMABLE_SCHEDULERS", "resume_refusal", "SkipTransformer"]

#: Scheduler classes whose whole step state is the scheduler object's plain attributes and whose
#: pipelines (Qwen-Image, SD3, CogVideoX, LTX-Video, HunyuanVideo) carry nothing else between
#: steps but the latents: a resume with them is the uninterrupted run, checked per family.
RESUMABLE_SCHEDULERS = ("FlowMatchEulerDiscreteScheduler", "CogVideoXDDIMScheduler")

#: The name the skip hook has in the transformer's diffusers hook registry.
HOOK_NAME = "sporch_resume_skip"


def resume_refusal(scheduler: Any, step_cache: bool) -> str | None:
    """Why a prompt of this pipeline cannot resume exactly after a requeue (it restarts), or None."""
    if step_cache:
        return "workload.cache keeps its residuals in the transformer's hooks, which the step files do not hold"
    name = type(scheduler).__name__
    if name not in RESUMABLE_SCHEDULERS:
        return (f"{name} is not among the schedulers whose resume is checked exact "
                f"({', '.join(RESUMABLE_SCHEDULERS)})")
    return None


class SkipTransformer:
    """While attached (a context manager), every call of the transformer returns a placeholder
    of its ``hidden_states``' shape (ones: finite through any guidance arithmetic, e.g.
    Qwen-Image's norm rescaling) without computing anything; ``calls`` counts them. Attached
    through diffusers' hook registry (``ModelHook.new_forward``), detached with
    :meth:`detach` (the boundary step) or on exit."""

    def __init__(self, transformer: torch.nn.Module) -> None:
        self.transformer = transformer
        self.calls = 0
        self._attached = False

    def __enter__(self) -> "SkipTransformer":
        from diffusers.hooks import HookRegistry, ModelHook

        owner = self

        class _Skip(ModelHook):
            def new_forward(self, module, *args, **kwargs):
                owner.calls += 1
                if "hidden_states" not in kwargs:
                    raise ValueError(f"resume: {type(module).__name__} was called without hidden_states by name")
                out = torch.ones_like(kwargs["hidden_states"])
                if kwargs.get("return_dict", True):
                    from diffusers.models.modeling_outputs import Transformer2DModelOutput

                    return Transformer2DModelOutput(sample=out)
                return (out,)

        HookRegistry.check_if_exists_or_initialize(self.transformer).register_hook(_Skip(), HOOK_NAME)
        self._attached = True
        return self

    def detach(self) -> None:
        if self._attached:
            from diffusers.hooks import HookRegistry

            HookRegistry.check_if_exists_or_initialize(self.transformer).remove_hook(HOOK_NAME, recurse=False)
            self._attached = False

    def __exit__(self, *exc) -> None:
        self.detach()
