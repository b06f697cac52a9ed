"""The generate parameters (:class:`GenerateParams`), read from the Plan here and nowhere else in
runtime/pipelines/. ("Spec" in sporch means what a user's file says: JobSpec, ClusterSpec.)

(``plan.model`` / ``plan.workload`` / ``plan.sequence`` are the Plan's typed sections,
sporch.orchestrator.contract.sections.)
"""

from __future__ import annotations

from dataclasses import dataclass

from sporch.orchestrator.models.families import get_family
from sporch.orchestrator.models.generate_inputs import generate_family, read_prompts
from sporch.orchestrator.contract.plan import Plan


@dataclass(frozen=True)
class GenerateParams:
    family: str  # plan.model.family (models/families; its runtime module: runtime/models/families)
    model: dict  # plan.model (its diffusers_config: the transformer's config, what a tiny folder is built from)
    root: str  # the diffusers pipeline folder (model.weights)
    tiny_weights: bool  # create a tiny random pipeline at ``root`` when it does not exist
    prompts: tuple[str, ...]
    negative_prompt: str | None
    seed: int  # prompt i uses seed + i
    steps: int
    guidance_scale: float
    cfg: bool  # classifier-free guidance runs: the planner's decision (plan.workload.cfg_enabled)
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
    text_encoder: str = "leader"  # plan.placement.text_encoder: leader | sharded | cpu
    vae: str = "leader"  # plan.placement.vae: leader | tiled | parallel
    # Wan2.2 A14B's two experts (plan.model.boundary_ratio; None: one transformer), the low-noise
    # expert's CFG scale (None: guidance_scale) and where the idle expert waits (resident | offload)
    boundary_ratio: float | None = None
    guidance_scale_2: float | None = None
    experts: str = "resident"
    image: str | None = None  # image-to-video: the first frame's file (plan.workload.image)
    # Wan2.2 TI2V-5B (plan.model.expand_timesteps): one timestep per token; with ``image`` the first
    # latent frame is the image's (timestep 0), without it all tokens share the step's timestep
    expand_timesteps: bool = False
    attention_precision: str = "exact"  # plan.workload.attention_precision: exact | lossy (SageAttention)
    sigmas: tuple[float, ...] | None = None  # plan.workload.sigmas: the steps' sigmas before the shift

    @property
    def video(self) -> bool:
        return get_family(self.family).video


def generate_params(plan: Plan) -> GenerateParams:
    """The one place plan fields are read for a generate job."""
    model, wl, seq = plan.model, plan.workload, plan.sequence
    family = generate_family(model)
    if wl.prompt_file:
        prompts = tuple(read_prompts(wl.prompt_file))
    elif wl.prompt:
        prompts = (wl.prompt,)
    else:
        raise ValueError("workload.kind=generate needs workload.prompt or workload.prompt_file")
    frames = wl.frames or 1
    fmt = wl.output_format or ("mp4" if family.video else "png")
    return GenerateParams(
        family=family.name, model=model.to_dict(), root=model.weights or "", tiny_weights=wl.tiny_weights,
        prompts=prompts, negative_prompt=wl.negative_prompt, seed=wl.seed, steps=wl.steps,
        guidance_scale=wl.guidance_scale, cfg=wl.cfg_enabled, shift=wl.shift, scheduler=wl.scheduler, output_format=fmt,
        fps=wl.fps, frames=frames, height=wl.height, width=wl.width, text_len=model.text_len,
        dtype=wl.dtype, batch=wl.batch, grid=tuple(seq.grid),
        text_encoder=plan.placement.text_encoder, vae=plan.placement.vae,
        boundary_ratio=model.boundary_ratio, guidance_scale_2=wl.guidance_scale_2, experts=plan.placement.experts,
        image=wl.image, expand_timesteps=bool(model.expand_timesteps), attention_precision=wl.attention_precision,
        sigmas=None if wl.sigmas is None else tuple(wl.sigmas),
    )
