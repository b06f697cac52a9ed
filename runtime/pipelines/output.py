"""The leader's output of one prompt on the one model path (runtime/pipelines/generate_run.py): the
pipeline's decoded frames checked and written as one PNG/MP4 (:mod:`.media`), the prompt's result
row, and its record that a requeued run skips the prompt (:class:`.resume.FinishedPrompts`)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import torch

from sporch.runtime.models.finite import check_output

from sporch.runtime.pipelines.resume import FinishedPrompts
from sporch.runtime.pipelines.media import output_name, write
from sporch.runtime.pipelines.params import GenerateParams
from sporch.runtime.pipelines.phase_timing import PhaseTimer

__all__ = ["write_prompt"]


def result_frames(out, video: bool) -> np.ndarray:
    """[B, F, H, W, 3] float frames in [0, 1] from a pipeline output with ``output_type="np"``."""
    if video:
        return np.asarray(out.frames, dtype=np.float32)
    return np.asarray(out.images, dtype=np.float32)[:, None]


def write_prompt(frames: Any, spec: GenerateParams, index: int, seed: int, output_dir: Path, stages: PhaseTimer,
                 finished: FinishedPrompts) -> tuple[dict[str, Any], np.ndarray]:
    """Prompt ``index``'s file from its float frames [1, F, H, W, 3] (:func:`result_frames` of the
    pipeline's output, or a kept latent's decode), timed as the ``save`` phase, then recorded as
    finished (after the file: a requeued run skips this prompt): its result row and its frames
    [F, H, W, 3]."""
    frames = np.asarray(frames, dtype=np.float32)
    check_output(torch.from_numpy(frames), "generate (decoded frames)")
    with stages("save"):
        path = write(Path(output_dir) / output_name(index, spec.prompts[index], spec.output_format), frames[0],
                     spec.output_format, spec.fps)
    f, h, w = frames[0].shape[:3]
    row = {"index": index, "prompt": spec.prompts[index], "seed": seed, "file": path.name,
           "path": str(path), "format": spec.output_format, "frames": int(f), "height": int(h), "width": int(w)}
    finished.record(row, path)
    return row, frames[0]
