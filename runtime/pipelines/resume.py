"""A requeue in the middle of a prompt (:mod:`.generic`): resumed from the last
finished step through the diffusers pipeline's own call, not a copy of its loop.

After every denoising step the pipeline's ``callback_on_step_end`` hands sporch the latents; each
rank writes them and its scheduler's state into the step files of :mod:`.step_checkpoint` (same format,
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

A prompt the job already finished is not denoised again (:class:`FinishedPrompts`): once the
leader has written a prompt's PNG/MP4 it records the result row with the file's SHA-256 and the
run's :func:`~.step_checkpoint.plan_key` (``checkpoint/generate_done.<index>.json``); a later run of the
same plan into the same folder (a requeue, the job run again) skips every prompt whose record
matches and whose file is still the one recorded, agreed over the replica by its leader, and
lists the recorded row in its result as if it had written it.
"""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path
from typing import Any, Mapping, Sequence

import torch

from sporch.orchestrator.contract.job_files import JobFiles
from sporch.orchestrator.safe_files import NotAFileError, read_regular, write_atomic
from sporch.runtime.parallel import ParallelContext

from sporch.runtime.pipelines.replica import share_from_leader

__all__ = ["RESUMABLE_SCHEDULERS", "resume_refusal", "SkipTransformer", "FinishedPrompts"]

#: Scheduler classes whose whole step state is the scheduler object's plain attributes and whose
#: pipelines (Wan, Flux.1, Qwen-Image, SD3, CogVideoX, LTX-Video, HunyuanVideo) carry nothing else
#: between steps but the latents: a resume with them is the uninterrupted run, checked per family
#: (UniPC's history of model outputs and timesteps is among its attributes; RecipeSigmasScheduler is
#: the flow-matching Euler scheduler with a few-step recipe's sigmas, runtime/pipelines/schedulers.py).
RESUMABLE_SCHEDULERS = ("FlowMatchEulerDiscreteScheduler", "CogVideoXDDIMScheduler", "UniPCMultistepScheduler",
                        "RecipeSigmasScheduler")

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
    """While attached (a context manager), every call of each of the transformers (the pipeline's
    one, or Wan2.2 A14B's two experts) returns a placeholder of its ``hidden_states``' shape (ones:
    finite through any guidance arithmetic, e.g. Qwen-Image's norm rescaling) without computing
    anything; ``calls`` counts them. Attached through diffusers' hook registry
    (``ModelHook.new_forward``), detached with :meth:`detach` (the boundary step) or on exit."""

    def __init__(self, transformers: Sequence[torch.nn.Module]) -> None:
        self.transformers = list(transformers)
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

        for transformer in self.transformers:
            HookRegistry.check_if_exists_or_initialize(transformer).register_hook(_Skip(), HOOK_NAME)
        self._attached = True
        return self

    def detach(self) -> None:
        if self._attached:
            from diffusers.hooks import HookRegistry

            for transformer in self.transformers:
                HookRegistry.check_if_exists_or_initialize(transformer).remove_hook(HOOK_NAME, recurse=False)
            self._attached = False

    def __exit__(self, *exc) -> None:
        self.detach()


class FinishedPrompts:
    """The prompts of this job whose output an earlier run wrote: one record per prompt,
    ``checkpoint/generate_done.<index>.json`` (written by the replica's leader after the output
    file, atomically): the run's key (:func:`~.step_checkpoint.plan_key`), the output file's SHA-256 and
    the result row. A record counts only for the same key, the same file name and an unchanged
    file: another plan, a deleted or replaced output denoises the prompt again."""

    def __init__(self, output_dir: str | os.PathLike, key: str) -> None:
        self.folder = Path(JobFiles(str(output_dir)).checkpoint)
        self.key = key

    def _path(self, index: int) -> Path:
        return self.folder / f"generate_done.{index:05d}.json"

    def record(self, row: Mapping[str, Any], output: Path) -> None:
        """Prompt ``row["index"]`` is finished: its output ``output`` is written (leader)."""
        doc = {"key": self.key, "sha256": _digest(output), "row": dict(row)}
        write_atomic(self._path(int(row["index"])), json.dumps(doc, indent=1, sort_keys=True) + "\n", fsync=False)

    def row(self, index: int, output: Path) -> dict[str, Any] | None:
        """The recorded result row of prompt ``index`` (its path the one given) when an earlier
        run of this plan finished it and ``output`` is still the file it wrote; else None."""
        try:
            doc = json.loads(read_regular(self._path(index)))
            row = doc["row"]
            ok = (doc.get("key") == self.key and row.get("index") == index and row.get("file") == output.name
                  and doc.get("sha256") == _digest(output))
        except (OSError, NotAFileError, ValueError, KeyError, TypeError, AttributeError):
            return None  # none, unreadable or another format: the prompt is denoised
        return {**row, "path": str(output)} if ok else None

    def agreed(self, ctx: ParallelContext | None, outputs: Mapping[int, Path]) -> dict[int, dict[str, Any]]:
        """{index: recorded row} of the prompts ``outputs`` ({index: its output file}) that are
        finished, as the replica's leader reads them, on every rank of the replica (collective)."""
        def read() -> dict[int, dict[str, Any]]:
            rows = {i: self.row(i, path) for i, path in outputs.items()}
            return {i: r for i, r in rows.items() if r is not None}
        return share_from_leader(ctx, read, "reading the finished prompts' records")


def _digest(path: Path) -> str:
    return hashlib.sha256(read_regular(path)).hexdigest()
