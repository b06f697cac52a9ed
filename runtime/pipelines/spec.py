"""The generate settings, read from the Plan here and nowhere else in runtime/pipelines/.

(``plan.model`` / ``plan.workload`` / ``plan.sequence`` are plain dicts today; if they become
typed sections, this is the one function to change.)
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from .check import family_of, read_prompts


@dataclass(frozen=True)
class GenerateSpec:
    family: str  # "wan" (video, MP4) | "flux" (image, PNG)
    model: dict  # plan.model, for build_model / ModelConfig
    root: str  # the diffusers pipeline folder (model.weights)
    tiny_weights: bool  # create a tiny random pipeline at ``root`` when it does not exist
    prompts: tuple[str, ...]
    negative_prompt: str | None
    seed: int  # prompt i uses seed + i
    steps: int
    guidance_scale: float
    shift: float | None  # None: the scheduler folder's (Wan flow_shift) / the resolution-dependent mu (Flux)
    scheduler: str | None  # None: the folder's scheduler; "unipc" | "euler"
    output_format: str  # "mp4" | "png"
    fps: int
    frames: int
    height: int
    width: int
    text_len: int
    dtype: str
    batch: int  # samples per denoising pass, over all dp replicas
    grid: tuple[int, int, int]

    @property
    def video(self) -> bool:
        return self.family == "wan"


def generate_spec(plan: Any) -> GenerateSpec:
    """The one place plan fields are read for a generate job."""
    model, wl, seq = dict(plan.model), plan.workload, plan.sequence or {}
    family = family_of(model)
    if wl.get("prompt_file"):
        prompts = tuple(read_prompts(wl["prompt_file"]))
    elif wl.get("prompt"):
        prompts = (str(wl["prompt"]),)
    else:
        raise ValueError("workload.kind=generate needs workload.prompt or workload.prompt_file")
    frames = int(wl.get("frames") or 1)
    fmt = wl.get("output_format") or ("mp4" if family == "wan" else "png")
    return GenerateSpec(
        family=family, model=model, root=str(model.get("weights") or ""), tiny_weights=bool(wl.get("tiny_weights")),
        prompts=prompts, negative_prompt=wl.get("negative_prompt"), seed=int(wl.get("seed") or 0),
        steps=int(wl.get("steps") or 1), guidance_scale=float(wl.get("guidance_scale") or 1.0),
        shift=None if wl.get("shift") is None else float(wl["shift"]), scheduler=wl.get("scheduler"),
        output_format=str(fmt), fps=int(wl.get("fps") or 16), frames=frames, height=int(wl["height"]),
        width=int(wl["width"]), text_len=int(model["text_len"]), dtype=str(wl.get("dtype") or "float32"),
        batch=int(wl.get("batch") or 1), grid=tuple(int(g) for g in seq["grid"]),
    )
