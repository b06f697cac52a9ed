"""The inference workload and verify's sampling check: the flow-matching Euler loop on the family's
random inputs, the transformer run sequence-parallel (``workload.kind: inference``, docs/runtime.md).

Rectified flow as Wan2.1 / SD3 / Flux.1 train it: ``x_sigma = (1 - sigma) x0 + sigma noise``, the
model's output read as the velocity ``noise - x0`` at timestep ``sigma x TIMESTEP_SCALE`` (1000, or
1 for the families whose transformer takes the sigma itself: Flux.1, Qwen-Image; the family's
runtime module says), sigmas from 1 to 0 over the steps (``workload.sigmas`` before the shift, or
evenly spaced), shifted by ``workload.shift``; each Euler step ``x += (sigma_next - sigma) v``. It
measures the denoising loop of any family on the same footing (one transformer call per step, CFG
as one doubled batch or split over the cfg group); it is not the family's own sampler (PixArt's
DPM-Solver, CogVideoX's DDIM: generate runs those).

The inputs are the family module's ``inputs`` for the plan's grid, drawn from ``workload.seed``
identically on every rank (noise: the ``hidden_states``), each dp replica taking its rows of the
global batch. Where the input has more channels than the output (Wan2.1 I2V's 16 noise + 20
condition channels) the extra channels are a fixed condition and the state is the first ones;
where the output has more (PixArt's learned sigma) the velocity is the first ``C_in`` channels.

After every step each rank saves the latents (:class:`~sporch.runtime.progress.Progress`), so a
requeued job resumes from the last finished step; ``workload.cache`` applies the step cache to
the transformer (one cache context per run, the skip decision agreed over the replica).
"""

from __future__ import annotations

import time
from typing import Any, Callable, Mapping, Sequence

import torch

from sporch.orchestrator.contract.plan import Plan
from sporch.runtime.measure import peak_memory_bytes, sync
from sporch.runtime.parallel import ParallelContext

from sporch.runtime.models.families import family_module
from sporch.runtime.models.runner import ShardedTransformer

__all__ = ["flow_sigmas", "denoise", "replica_inputs", "state_and_condition", "velocity_of", "timestep_scale"]


def flow_sigmas(steps: int, shift: float | None = None, given: Sequence[float] | None = None) -> torch.Tensor:
    """``steps + 1`` sigmas from 1 down to 0 (float64), time-shifted by ``shift`` (None: no shift).
    ``given``: the ``steps`` sigmas before the shift (``workload.sigmas``, a recipe's list), 0 appended."""
    if steps < 1:
        raise ValueError(f"steps must be >= 1, got {steps}")
    if given is not None:
        if len(given) != steps:
            raise ValueError(f"{len(given)} sigmas for {steps} steps")
        s = torch.tensor([*map(float, given), 0.0], dtype=torch.float64)
    else:
        s = torch.linspace(1.0, 0.0, steps + 1, dtype=torch.float64)
    if shift is not None and shift != 1.0:
        s = shift * s / (1.0 + (shift - 1.0) * s)
    return s


def timestep_scale(family: str) -> float:
    """What the family's transformer takes as the timestep of sigma 1 (its module's
    ``TIMESTEP_SCALE``; 1000 by default)."""
    return float(getattr(family_module(family), "TIMESTEP_SCALE", 1000.0))


def sampling_form(family: str, inputs: Mapping[str, Any], forward: Callable[..., Any]):
    """(inputs, forward) as :func:`denoise` takes them for ``family``: as they are, or converted by its
    runtime module's ``sampling(inputs, forward)`` where its class names its latents and timestep
    otherwise (Z-Image: ``x``, a list per sample, and ``t``), so the loop's ``hidden_states`` and
    ``timestep`` reach the class as its pipeline passes them."""
    convert = getattr(family_module(family), "sampling", None)
    return (inputs, forward) if convert is None else convert(inputs, forward)


def _channel_dim(x: torch.Tensor) -> int:
    """Latents [B, C, ...] (images, videos) carry channels on dim 1; packed tokens [B, N, C] last."""
    return 1 if x.dim() >= 4 else -1


def state_and_condition(hidden: torch.Tensor, out_channels: int) -> tuple[torch.Tensor, torch.Tensor | None]:
    """(the state the loop integrates, the fixed condition channels or None) of the input latents."""
    d = _channel_dim(hidden)
    c_in = hidden.shape[d]
    if out_channels >= c_in:
        return hidden, None
    return hidden.narrow(d, 0, out_channels), hidden.narrow(d, out_channels, c_in - out_channels)


def velocity_of(out: torch.Tensor, state: torch.Tensor) -> torch.Tensor:
    """The model's output as the velocity of ``state`` (its first channels where it has more)."""
    d = _channel_dim(state)
    return out if out.shape == state.shape else out.narrow(d, 0, state.shape[d])


def replica_inputs(inputs: Mapping[str, Any], batched: Sequence[str], rows: range, batch: int,
                   cfg: bool) -> dict[str, Any]:
    """The forward arguments of this dp replica's ``rows`` of the global ``batch`` (both CFG halves'
    rows where ``cfg``: the batch holds ``[cond rows; uncond rows]``)."""
    keep = list(rows) + ([batch + r for r in rows] if cfg else [])
    idx = torch.tensor(keep, dtype=torch.long)

    def cut(value: Any) -> Any:
        if torch.is_tensor(value) and value.dim() and value.shape[0] == batch * (2 if cfg else 1):
            return value.index_select(0, idx.to(value.device))
        if isinstance(value, Mapping):
            return {k: cut(v) for k, v in value.items()}
        if isinstance(value, list) and len(value) == batch * (2 if cfg else 1):
            return [value[i] for i in keep]
        return value

    return {k: (cut(v) if k in batched else v) for k, v in inputs.items()}


def denoise(forward: Callable[..., torch.Tensor], inputs: Mapping[str, Any], sigmas: torch.Tensor, *,
            scale: float, cfg: bool, guidance_scale: float, out_channels: int, start: int = 0,
            state: torch.Tensor | None = None,
            after_step: Callable[[int, torch.Tensor], None] | None = None) -> torch.Tensor:
    """Integrate ``sigmas`` with Euler steps from ``start`` (``state``: the latents after those
    steps; None: the inputs' noise): ``forward(**kwargs)`` the transformer's output for the
    inputs with ``hidden_states`` and ``timestep`` replaced; with ``cfg`` the batch holds both
    passes (conditional rows first) and the velocity is ``uncond + g (cond - uncond)``. Returns
    the final latents (float32); ``after_step(i, x)`` after each step."""
    hidden = inputs["hidden_states"]
    key = "timestep" if "timestep" in inputs else "timesteps"  # the forward's name for it (HiDream: timesteps)
    rows = hidden.shape[0] // (2 if cfg else 1)
    x0, condition = state_and_condition(hidden[:rows], out_channels)
    x = (x0 if state is None else state).float()
    for i in range(start, len(sigmas) - 1):
        s, s_next = float(sigmas[i]), float(sigmas[i + 1])
        latents = x.to(hidden.dtype)
        if condition is not None:
            latents = torch.cat([latents, condition], dim=_channel_dim(x))
        if cfg:
            latents = torch.cat([latents, latents], dim=0)
        # the step's timestep in the shape the class's input has (a row each; MiniMax-H3: one per stream)
        t = torch.full_like(inputs[key], s * scale, device=latents.device)
        out = velocity_of(forward(**{**inputs, "hidden_states": latents, key: t}).float(), x)
        if cfg:
            cond, uncond = out[:rows], out[rows:]
            out = uncond + guidance_scale * (cond - uncond)
        x = x + (s_next - s) * out
        if after_step is not None:
            after_step(i, x)
    return x


def run_inference(plan: Plan, ctx: ParallelContext, device: torch.device, progress: Any, model: torch.nn.Module,
                  config: Mapping[str, Any], inputs: Mapping[str, Any], runner: ShardedTransformer,
                  step_cache: Any = None) -> dict[str, Any]:
    """``workload.kind: inference`` on this rank (the module docstring): this replica's latents,
    resumed after a requeue; the result's fields (``step_ms``, ``latent_shape`` ...). The leader of
    each replica writes its latents (``latents_dp<R>.safetensors``)."""
    wl = plan.workload
    fam = plan.model.family
    sigmas = flow_sigmas(wl.steps, wl.shift, wl.sigmas)
    out_channels = int(config.get("out_channels") or config["in_channels"])
    saved = progress.load() or {}
    start = int(saved.get("step", 0))
    state = progress.load_shard(start) if start else None
    if state is None:
        start = 0
    else:
        state = state.to(device)
    step_ms: list[float] = list(saved.get("step_ms", []))[:start]
    clock = [0.0]

    def after_step(i: int, x: torch.Tensor) -> None:
        sync(device)
        step_ms.append((time.perf_counter() - clock[0]) * 1e3)
        progress.step_done(i + 1, {"kind": "inference", "step_ms": step_ms, "total": wl.steps}, shard=x)
        clock[0] = time.perf_counter()  # the checkpoint's I/O is not step time

    with torch.no_grad():
        sync(device)
        clock[0] = time.perf_counter()
        loop_inputs, forward = sampling_form(fam, inputs, runner.forward)
        latents = denoise(forward, loop_inputs, sigmas, scale=timestep_scale(fam), cfg=wl.cfg_enabled,
                          guidance_scale=wl.guidance_scale, out_channels=out_channels, start=start, state=state,
                          after_step=after_step)
    progress.finish()
    return {"kind": "inference", "steps": wl.steps, "step_ms": step_ms, "latent_shape": list(latents.shape),
            "latent_mean": float(latents.mean()),
            "latent_std": float(latents.std()) if latents.numel() > 1 else 0.0,
            "peak_memory_bytes": peak_memory_bytes(device), "resumed": start > 0, "resumed_from_step": start,
            "latents": latents}
