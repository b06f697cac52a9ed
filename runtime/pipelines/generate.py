"""The generate workload: prompts -> text condition -> sharded denoising -> VAE -> files.

Per dp replica (prompts are split over replicas like a batch, contiguous; a replica may get
none): the leader encodes the replica's prompts once and broadcasts them; then prompt
batches of ``batch // dp`` samples run through the sharded transformer, the scheduler
stepping each rank's own token shard; the latents are gathered over the sequence group and
the leader decodes and writes one file per prompt into the job folder. Where the text encoder
and the VAE run (``plan.placement``: sharded encoders, a CPU encoder, a tiled or a parallel
decode over the leader's sequence group) is text.py's and vae.py's business.

Noise: prompt ``i`` gets ``seed + i`` and its own ``torch.Generator`` on the CPU, drawn with
diffusers' ``randn_tensor`` in the shape the pipelines' ``prepare_latents`` use (float32), so
``WanPipeline(prompt_i, generator=torch.Generator().manual_seed(seed + i))`` starts from the
same noise.

Wan2.2 A14B denoises with two experts (experts.py): the step loop asks for the one of each
timestep; the result records the step at which the low-noise expert took over. Wan2.2 TI2V-5B
with ``workload.image`` keeps the first latent frame the image's, at timestep 0 (first_frame.py).
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any, Callable

import torch
import torch.distributed as dist

from sporch.orchestrator.models.generate_inputs import require_pipelines
from sporch.orchestrator.contract.plan import Plan
from sporch.runtime import faults
from sporch.runtime.measure import peak_memory_bytes, sync
from sporch.runtime.model import ShardedDiT, resolve_dtype
from sporch.runtime.model.base import unpatchify
from sporch.runtime.model.cache import StepCaches
from sporch.runtime.model.cache.agreement import agreed_fields
from sporch.runtime.model.condition import cond_rows
from sporch.runtime.model.finite import check_output
from sporch.runtime.model.sharded import replica_rows
from sporch.runtime.parallel import ParallelContext
from sporch.runtime.progress import Progress, RequeueRequested, requeue_self

from .media import output_name, write
from .schedulers import load_scheduler, timesteps
from .params import GenerateParams, generate_params
from .latents import LatentStore, cache_label
from .resume import DenoiseCheckpoint, plan_key, restore_scheduler
from .replica import is_leader, share_from_leader
from .phase_timing import PhaseTimer
from .experts import Experts, build_experts
from .image_condition import image_condition, image_tokens
from .first_frame import FirstFrame
from .generic import run_generic_generate
from .text import encode_for_replica
from .tiny import save_tiny_pipeline
from .vae import Decoder


def initial_noise(params: GenerateParams, channels: int, seeds: list[int]) -> torch.Tensor:
    """[b, C, F, H, W] float32: one CPU generator per sample, as the pipelines draw it."""
    from diffusers.utils.torch_utils import randn_tensor

    st, sh, sw = (int(s) for s in params.model["vae_stride"])
    f = (params.frames - 1) // st + 1
    h, w = params.height // sh, params.width // sw
    shape = (1, channels, f, h, w) if params.video else (1, channels, h, w)
    out = [randn_tensor(shape, generator=torch.Generator().manual_seed(s), dtype=torch.float32) for s in seeds]
    x = torch.cat(out)
    return x if params.video else x[:, :, None]


def _say(ctx: ParallelContext | None, msg: str) -> None:
    if is_leader(ctx):
        prefix = f"[dp {ctx.dp_rank}] " if ctx is not None and ctx.dp > 1 else ""
        print(prefix + msg, flush=True)


def ensure_weights(params: GenerateParams, ctx: ParallelContext | None) -> None:
    """With ``workload.tiny_weights``: rank 0 creates the tiny random pipeline if the folder
    is missing; the others wait for it."""
    if not params.tiny_weights:
        return
    if ctx is None or ctx.rank == 0:
        if not Path(params.root).exists():
            save_tiny_pipeline(params.family, params.root, params.model)
    if ctx is not None and dist.is_initialized():
        with ctx.guard():
            dist.barrier()


def run_generate(plan: Plan, ctx: ParallelContext | None, device: torch.device, output_dir: Path,
                 log: Callable[[ParallelContext | None, str], None] = _say,
                 frames_sink: Callable[[int, Any], None] | None = None,
                 progress: Progress | None = None,
                 compile_model: Callable[[torch.nn.Module], Any] | None = None) -> dict[str, Any]:
    """Run the generate workload of ``plan`` on this rank; ``frames_sink(index, frames)``
    (tests) also receives each prompt's decoded float frames [F, H, W, 3].

    Prompts whose latents an earlier run of the job saved (:mod:`.latents`) are decoded
    without denoising; when every prompt of the replica has them, nothing is encoded either.
    A batch a requeued run was denoising resumes from its last finished step (:mod:`.resume`;
    ``progress`` carries the USR2 stop request). ``compile_model``: passed to the generic path
    (:func:`.generic.run_generic_generate`); the hand-built pipelines run eagerly."""
    require_pipelines()
    if plan.model.diffusers_class:  # the generic path: the family's diffusers pipeline (generic.py)
        return run_generic_generate(plan, ctx, device, output_dir, log=log, frames_sink=frames_sink,
                                    compile_model=compile_model, progress=progress)
    params = generate_params(plan)
    ensure_weights(params, ctx)
    dtype = resolve_dtype(params.dtype)
    mine = replica_rows(len(params.prompts), ctx)  # this replica's prompt indices
    per_pass = max(1, params.batch // (ctx.dp if ctx is not None else 1))
    parallel_vae = params.vae == "parallel" and ctx is not None and ctx.sequence_size > 1
    decodes = is_leader(ctx) or (parallel_vae and ctx.cfg_rank == 0)  # this rank takes part in decoding
    encodes = is_leader(ctx) or (params.text_encoder == "sharded" and ctx is not None and ctx.sequence_size > 1)
    out: dict[str, Any] = {"kind": "generate", "prompts": len(mine), "steps": params.steps,
                           "roles": ([r for r, on in (("text_encoder", encodes), ("vae", decodes)) if on]
                                     if len(mine) else [])}
    if not len(mine):
        out["peak_memory_bytes"] = peak_memory_bytes(device)
        return out
    store = LatentStore(params, output_dir, step_cache=cache_label(plan.workload.cache))
    saved = set(share_from_leader(ctx, lambda: [i for i in mine if store.has(i)], "reading saved latents"))
    phases = PhaseTimer(device)
    ckpt = DenoiseCheckpoint(output_dir, ctx, (lambda: progress.stop_requested) if progress is not None
                             else (lambda: False), key=plan_key(plan))
    resumed: dict[int, int] = {}
    batches = [list(range(k, min(k + per_pass, len(mine)))) for k in range(0, len(mine), per_pass)]
    todo = [rows for rows in batches if not all(mine[r] in saved for r in rows)]
    if saved:
        log(ctx, f"{sum(1 for r in range(len(mine)) if mine[r] in saved)} prompt(s) already denoised "
                 f"(latents in {store.folder}): decoding them without denoising again")

    experts = cond_all = null_all = first_latent = None
    if todo:
        with phases("encode"):
            prompts = [params.prompts[i] for i in mine]
            cond_all, null_all = encode_for_replica(params, prompts, ctx, device, dtype, params.cfg, params.text_encoder)
            if params.image and params.expand_timesteps:  # Wan2.2 TI2V: the image is the first latent frame
                first_latent = _image_latent(params, ctx, device)
            elif params.image:
                cond_all, null_all = _with_image(params, ctx, device, dtype, cond_all, null_all)
        log(ctx, f"encoded {len(prompts)} prompt(s) in {phases.seconds('encode'):.1f} s")
        with phases("load"):
            experts = build_experts(params, ctx, plan.placement.shard_weights, dtype, device)
    image_tokens = params.grid[0] * params.grid[1] * params.grid[2]
    decoder = None
    outputs: list[dict[str, Any]] = []
    step_ms: list[float] = []
    switches: list[int | None] = []  # per denoised batch: the first step of transformer_2
    cached: list[dict[str, Any]] = []  # per denoised batch: the steps computed and skipped
    latent_shape = None
    with torch.no_grad():
        for bi, rows in enumerate(batches):
            indices = [mine[r] for r in rows]
            seeds = [params.seed + i for i in indices]
            if rows in todo:
                step_cache = StepCaches(plan.workload.cache, params.steps, plan.model.preset)
                with phases("denoise"):
                    latents = _denoise(params, experts, cond_all, null_all, rows, seeds, image_tokens,
                                       device, step_ms, switches, lambda i, n: log(
                                           ctx, f"batch {bi + 1}/{len(batches)} step {i}/{n}  "
                                                f"{step_ms[-1] / 1e3:.2f} s/step"),
                                       ckpt=ckpt, batch=bi, resumed=resumed, ctx=ctx, log=log,
                                       step_cache=step_cache, first_latent=first_latent)
                if step_cache.on:
                    cached.append({"batch": bi, **step_cache.record()})
                if is_leader(ctx):
                    store.save(indices, latents)  # before decoding: a failed decode loses no denoising
                ckpt.finish(bi)
            elif parallel_vae:  # every rank of the decode group needs them
                latents = share_from_leader(ctx, lambda: store.load(indices), "reading saved latents")
            elif is_leader(ctx):
                latents = store.load(indices)
            else:
                continue
            latent_shape = list(latents.shape)
            if not decodes:
                continue
            if decoder is None:
                with phases("decode"):
                    decoder = Decoder(params, device, placement=params.vae,
                                      group=ctx.sequence_group if parallel_vae else None)
            with phases("decode"):
                frames = decoder(latents)
            if is_leader(ctx):
                with phases("save"):
                    outputs += _write(params, frames, indices, seeds, output_dir, log, ctx)
                for k, index in enumerate(indices):
                    if frames_sink is not None:
                        frames_sink(index, frames[k])
    out.update(step_ms=step_ms, outputs=outputs, stages=phases.record(steps=len(step_ms)),
               denoised_prompts=sum(len(r) for r in todo), reused_latents=sorted(saved & set(mine)),
               resumed={str(b): s for b, s in resumed.items()},
               parameters=experts.num_parameters() if experts is not None else None,
               peak_memory_bytes=peak_memory_bytes(device), latent_shape=latent_shape)
    if params.boundary_ratio is not None and experts is not None:
        out["experts"] = {**experts.record(), "switch_steps": switches}
        out["expert_switch_step"] = switches[0] if switches else None
    if "encode" in phases.seen:
        out["encode_s"] = phases.seconds("encode")
    if plan.workload.cache is not None:
        out["step_cache"] = step_cache_record(plan, cached, ctx)
    return out


def step_cache_record(plan: Plan, batches: list[dict[str, Any]], ctx: ParallelContext | None) -> dict[str, Any]:
    """result.json's ``step_cache``: the steps computed and skipped per denoised batch, and
    the skipped steps of every rank of this replica (checked equal: a difference raises)."""
    skipped = [b["skipped"] for b in batches]
    return {**agreed_fields(plan.workload.cache, skipped, ctx), "batches": batches, "skipped": skipped,
            "steps_computed": sum(len(b["computed"]) for b in batches),
            "steps_skipped": sum(len(b["skipped"]) for b in batches)}


def _image_latent(params: GenerateParams, ctx, device) -> torch.Tensor:
    """``workload.image`` encoded by the leader, on every rank of the replica (float32)."""
    return share_from_leader(ctx, lambda: image_condition(params, device).cpu(), "encoding workload.image").to(device)


def _with_image(params: GenerateParams, ctx, device, dtype, cond, null):
    """The text conditions with the first frame's latent condition (image-to-video) and, for
    Wan2.1 I2V, its CLIP image tokens: the same for every prompt and for the negative one."""
    lat = _image_latent(params, ctx, device).to(dtype=dtype)
    clip = None
    if params.image_embeds:
        clip = share_from_leader(ctx, lambda: image_tokens(params, device).cpu(), "encoding workload.image (CLIP)")
        clip = clip.to(device=device, dtype=dtype)

    def add(c):
        if c is None:
            return None
        out = {"text": c, "latents": lat.expand(c.shape[0], *lat.shape[1:])}
        if clip is not None:
            out["image"] = clip.expand(c.shape[0], *clip.shape[1:])
        return out
    return add(cond), add(null)


def _denoise(params, experts: Experts, cond_all, null_all, rows, seeds, image_tokens, device, step_ms, switches,
             on_step, *, ckpt: DenoiseCheckpoint, batch: int, resumed: dict, ctx, log,
             step_cache: StepCaches, first_latent: torch.Tensor | None = None) -> torch.Tensor:
    """One prompt batch through the scheduler's steps (from the last finished one when a
    requeued run left it); the gathered latents [B, C, F, H, W]. ``switches`` gets the index
    of the first step the low-noise expert ran (None: it never ran). ``step_cache``: this
    batch's (fresh; after a resume, and at the switch to the low-noise expert, the first step
    is computed). ``first_latent``: Wan2.2 TI2V's given first frame (first_frame.py)."""
    sl = slice(rows[0], rows[-1] + 1)
    cond = cond_rows(cond_all, sl)
    null = cond_rows(null_all, sl) if null_all is not None else None
    scheduler = load_scheduler(params)
    ts = timesteps(params, scheduler, image_tokens, torch.device("cpu"))
    experts.set_boundary(int(scheduler.config.num_train_timesteps))
    runner = experts.use(0)
    channels = runner.cfg.out_dim
    x = runner.shard_latents(initial_noise(params, channels, seeds)).float()
    given = None if first_latent is None else FirstFrame(runner, first_latent)
    first, batch_ms = 0, []
    got = ckpt.resume(batch, x.device)
    if got is not None:
        first, state = got
        x = state["x"]
        restore_scheduler(scheduler, state["scheduler"], x.device)
        batch_ms = list(state["step_ms"])
        resumed[batch] = first
        log(ctx, f"batch {batch + 1}: resuming after step {first}/{len(ts)} (requeued)")
    for i in range(first, len(ts)):
        t = ts[i]
        sync(device)
        start = time.perf_counter()
        runner = experts.runner(t)
        x_in, t_in = (x, float(t)) if given is None else (given.apply(x), given.timesteps(float(t)))
        v = runner.velocity(x_in, t_in, cond, guidance_scale=experts.guidance(t), null_cond=null, cfg=params.cfg,
                            step_cache=step_cache.for_step(i, experts.index(t)))
        x = scheduler.step(v, t, x, return_dict=False)[0]
        sync(device)
        batch_ms.append((time.perf_counter() - start) * 1e3)
        step_ms.append(batch_ms[-1])
        ckpt.save(batch, i + 1, x, scheduler, batch_ms)
        on_step(i + 1, len(ts))
        if i + 1 < len(ts) and ckpt.stop_agreed():
            if is_leader(ctx):
                requeue_self()
            raise RequeueRequested(f"stopped after step {i + 1}/{len(ts)} of prompt batch {batch + 1} on USR2; "
                                   "the step is kept and the job requeued")
    switches.append(next((i for i, t in enumerate(ts) if experts.index(t) == 1), None) if experts.boundary else None)
    if given is not None:
        x = given.apply(x)
    check_output(x, "generate (denoised latents)")  # this rank's shard, before the gather and the save
    if faults.swap_shards_set() and runner.sharded:
        return _swapped_shards(runner, x, channels)
    return runner.gather_latents(x, channels=channels)


def _swapped_shards(runner: ShardedDiT, x: torch.Tensor, channels: int) -> torch.Tensor:
    """The gathered latents, with the first two sequence shards swapped when the fault hook names
    this run's layout (:func:`sporch.runtime.faults.swaps_shards`): a deliberately wrong layout."""
    tokens = runner.gather(x)
    if faults.swaps_shards(runner.ctx.layout.name):
        n = runner.local_len
        tokens = torch.cat([tokens[:, n:2 * n], tokens[:, :n], tokens[:, 2 * n:]], dim=1)
    return unpatchify(tokens, runner.grid, runner.cfg.patch, channels)


def decode_saved(plan: Plan, device: torch.device, output_dir: Path,
                 log: Callable[[ParallelContext | None, str], None] = _say) -> list[dict[str, Any]]:
    """Decode every prompt whose latents ``output_dir`` keeps (one process, no transformer, no
    text encoder): what ``sporch decode RUN_DIR`` does. Returns the files written."""
    require_pipelines()
    params = generate_params(plan)
    store = LatentStore(params, output_dir)
    indices = store.saved()
    if not indices:
        raise FileNotFoundError(f"no latents of this job in {store.folder} (the job saves them once a prompt is "
                                "denoised); run the job")
    saved = {i: store.load([i]) for i in indices}  # every file checked against the plan before any decoding
    decoder = Decoder(params, device, placement="tiled" if params.vae == "tiled" else "leader")  # one process
    written: list[dict[str, Any]] = []
    with torch.no_grad():
        for i in indices:
            frames = decoder(saved[i])
            written += _write(params, frames, [i], [params.seed + i], output_dir, log, None)
    return written


def _write(params: GenerateParams, frames, indices: list[int], seeds: list[int], output_dir: Path, log,
           ctx: ParallelContext | None) -> list[dict]:
    rows = []
    for k, (index, seed) in enumerate(zip(indices, seeds)):
        prompt = params.prompts[index]
        path = write(Path(output_dir) / output_name(index, prompt, params.output_format), frames[k],
                     params.output_format, params.fps)
        f, h, w = frames[k].shape[:3]
        rows.append({"index": index, "prompt": prompt, "seed": seed, "file": path.name, "path": str(path),
                     "format": params.output_format, "frames": int(f), "height": int(h), "width": int(w)})
        log(ctx, f"wrote {path}")
    return rows
