"""The generate workload: prompts -> text condition -> sharded denoising -> VAE -> files.

Per dp replica (prompts are split over replicas like a batch, contiguous; a replica may get
none): the leader encodes the replica's prompts once and broadcasts them; then prompt
batches of ``batch // dp`` samples run through the sharded transformer, the scheduler
stepping each rank's own token shard; the latents are gathered over the sequence group and
the leader decodes and writes one file per prompt into the job folder.

Noise: prompt ``i`` gets ``seed + i`` and its own ``torch.Generator`` on the CPU, drawn with
diffusers' ``randn_tensor`` in the shape the pipelines' ``prepare_latents`` use (float32), so
``WanPipeline(prompt_i, generator=torch.Generator().manual_seed(seed + i))`` starts from the
same noise.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any, Callable

import torch
import torch.distributed as dist

from sporch.orchestrator.contract.generate_inputs import require_pipelines
from sporch.orchestrator.contract.plan import Plan
from sporch.runtime.measure import peak_memory_bytes, sync
from sporch.runtime.model import ShardedDiT, build_sharded, resolve_dtype
from sporch.runtime.model.condition import cond_rows
from sporch.runtime.model.sharded import replica_rows
from sporch.runtime.parallel import ParallelContext

from .media import output_name, write
from .schedulers import load_scheduler, timesteps
from .spec import GenerateSpec, generate_spec
from .text import encode_for_replica, is_leader
from .tiny import save_tiny_pipeline
from .vae import Decoder


def initial_noise(spec: GenerateSpec, channels: int, seeds: list[int]) -> torch.Tensor:
    """[b, C, F, H, W] float32: one CPU generator per sample, as the pipelines draw it."""
    from diffusers.utils.torch_utils import randn_tensor

    st, sh, sw = (int(s) for s in spec.model["vae_stride"])
    f = (spec.frames - 1) // st + 1
    h, w = spec.height // sh, spec.width // sw
    shape = (1, channels, f, h, w) if spec.video else (1, channels, h, w)
    out = [randn_tensor(shape, generator=torch.Generator().manual_seed(s), dtype=torch.float32) for s in seeds]
    x = torch.cat(out)
    return x if spec.video else x[:, :, None]


def _say(ctx: ParallelContext | None, msg: str) -> None:
    if is_leader(ctx):
        prefix = f"[dp {ctx.dp_rank}] " if ctx is not None and ctx.dp > 1 else ""
        print(prefix + msg, flush=True)


def ensure_weights(spec: GenerateSpec, ctx: ParallelContext | None) -> None:
    """With ``workload.tiny_weights``: rank 0 creates the tiny random pipeline if the folder
    is missing; the others wait for it."""
    if not spec.tiny_weights:
        return
    if ctx is None or ctx.rank == 0:
        if not Path(spec.root).exists():
            save_tiny_pipeline(spec.family, spec.root, spec.model)
    if ctx is not None and dist.is_initialized():
        with ctx.guard():
            dist.barrier()


def run_generate(plan: Plan, ctx: ParallelContext | None, device: torch.device, output_dir: Path,
                 log: Callable[[ParallelContext | None, str], None] = _say,
                 frames_sink: Callable[[int, Any], None] | None = None) -> dict[str, Any]:
    """Run the generate workload of ``plan`` on this rank; ``frames_sink(index, frames)``
    (tests) also receives each prompt's decoded float frames [F, H, W, 3]."""
    require_pipelines()
    spec = generate_spec(plan)
    ensure_weights(spec, ctx)
    dtype = resolve_dtype(spec.dtype)
    mine = replica_rows(len(spec.prompts), ctx)  # this replica's prompt indices
    per_pass = max(1, spec.batch // (ctx.dp if ctx is not None else 1))
    out: dict[str, Any] = {"kind": "generate", "prompts": len(mine), "steps": spec.steps,
                           "roles": ["text_encoder", "vae"] if is_leader(ctx) and len(mine) else []}
    if not len(mine):
        out["peak_memory_bytes"] = peak_memory_bytes(device)
        return out
    guidance = spec.guidance_scale
    cfg_on = spec.family == "wan" and guidance > 1.0
    if spec.family == "flux" and spec.negative_prompt:
        raise ValueError("Flux.1 is guidance-distilled (no CFG): workload.negative_prompt is not used; remove it")

    t0 = time.perf_counter()
    prompts = [spec.prompts[i] for i in mine]
    cond_all, null_all = encode_for_replica(spec, prompts, ctx, device, dtype, cfg_on)
    out["encode_s"] = time.perf_counter() - t0
    log(ctx, f"encoded {len(prompts)} prompt(s) in {out['encode_s']:.1f} s")

    mode = plan.placement.shard_weights if ctx is not None else "none"
    model = build_sharded(spec.model, ctx, mode, dtype=dtype, device=device, weights=spec.root)
    runner = ShardedDiT(model, ctx, grid=spec.grid)
    image_tokens = spec.grid[0] * spec.grid[1] * spec.grid[2]
    decoder = None
    outputs: list[dict[str, Any]] = []
    step_ms: list[float] = []
    batches = [list(range(k, min(k + per_pass, len(prompts)))) for k in range(0, len(prompts), per_pass)]
    with torch.no_grad():
        for bi, rows in enumerate(batches):
            sl = slice(rows[0], rows[-1] + 1)
            seeds = [spec.seed + mine[r] for r in rows]
            cond = cond_rows(cond_all, sl)
            null = cond_rows(null_all, sl) if null_all is not None else None
            scheduler = load_scheduler(spec)
            ts = timesteps(spec, scheduler, image_tokens, torch.device("cpu"))
            x = runner.shard_latents(initial_noise(spec, model.cfg.out_dim, seeds)).float()
            n = len(ts)
            for i, t in enumerate(ts):
                sync(device)
                start = time.perf_counter()
                v = runner.velocity(x, float(t), cond, guidance_scale=guidance, null_cond=null)
                x = scheduler.step(v, t, x, return_dict=False)[0]
                sync(device)
                step_ms.append((time.perf_counter() - start) * 1e3)
                log(ctx, f"batch {bi + 1}/{len(batches)} step {i + 1}/{n}  {step_ms[-1] / 1e3:.2f} s/step")
            latents = runner.gather_latents(x, channels=model.cfg.out_dim)
            if is_leader(ctx):
                if decoder is None:
                    decoder = Decoder(spec, device)
                frames = decoder(latents)
                outputs += _write(spec, frames, [mine[r] for r in rows], seeds, output_dir, log, ctx)
                for k, r in enumerate(rows):
                    if frames_sink is not None:
                        frames_sink(mine[r], frames[k])
    out.update(step_ms=step_ms, outputs=outputs, parameters=model.num_parameters(),
               peak_memory_bytes=peak_memory_bytes(device),
               latent_shape=list(latents.shape))
    return out


def _write(spec: GenerateSpec, frames, indices: list[int], seeds: list[int], output_dir: Path, log,
           ctx: ParallelContext | None) -> list[dict]:
    rows = []
    for k, (index, seed) in enumerate(zip(indices, seeds)):
        prompt = spec.prompts[index]
        path = write(Path(output_dir) / output_name(index, prompt, spec.output_format), frames[k],
                     spec.output_format, spec.fps)
        f, h, w = frames[k].shape[:3]
        rows.append({"index": index, "prompt": prompt, "seed": seed, "file": path.name, "path": str(path),
                     "format": spec.output_format, "frames": int(f), "height": int(h), "width": int(w)})
        log(ctx, f"wrote {path}")
    return rows
