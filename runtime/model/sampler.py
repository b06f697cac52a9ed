"""Flow-matching Euler sampler, and the seeded inputs every rank draws identically.

Convention (Wan2.1 / SD3 rectified flow): ``x_sigma = (1 - sigma) * x0 + sigma * noise``, the
model predicts the velocity ``v = noise - x0`` at timestep ``sigma * 1000``; sigmas run from 1
to 0 over N steps (optionally shifted: ``shift*s / (1 + (shift-1)*s)``), and each Euler step is
``x_{i+1} = x_i + (sigma_{i+1} - sigma_i) * v``.

Randomness: the noise and the condition come from ``torch.Generator`` objects seeded from
``seed`` alone (never the global RNG), for the *global* batch, on every rank; each dp replica
then takes its rows. So every rank of a sequence group (and of a cfg group) starts from
identical noise and sees identical timesteps.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Sequence

import torch

from sporch.runtime.parallel import ParallelContext

from .base import DiTBase, latent_shape
from .cache import StepCache
from .condition import Condition, cond_rows
from .layers import NUM_TRAIN_TIMESTEPS
from .sharded import ShardedDiT, dp_slice


def flow_sigmas(steps: int, shift: float | None = None, given=None) -> torch.Tensor:
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


def euler_sample(velocity: Callable[[torch.Tensor, float], torch.Tensor], x: torch.Tensor,
                 sigmas: torch.Tensor, callback: Callable[[int, torch.Tensor], None] | None = None,
                 start: int = 0, step_cache: StepCache | None = None) -> torch.Tensor:
    """Integrate ``dx/dsigma = velocity(x, sigma)`` over ``sigmas`` with Euler steps (float32).
    ``start``: the number of steps already taken (``x`` is the state after them: a resume).
    ``step_cache``: told each step's index before its velocity (the cache the velocity uses)."""
    x = x.float()
    for i in range(start, len(sigmas) - 1):
        s, s_next = float(sigmas[i]), float(sigmas[i + 1])
        if step_cache is not None:
            step_cache.start_step(i)
        x = x + (s_next - s) * velocity(x, s).float()
        if callback is not None:
            callback(i, x)
    return x


@dataclass
class SampleInputs:
    """The seeded inputs of one job, for this rank's dp replica."""

    noise: torch.Tensor  # [b, C, F, H, W] float32 (this replica's rows)
    cond: Condition  # text embeddings [b, T, text_dim], labels [b], or a dict (sporch.runtime.model.condition)
    null_cond: Condition
    rows: slice  # this replica's rows of the global batch


def make_inputs(model: DiTBase, grid: Sequence[int], batch: int, seed: int, ctx: ParallelContext | None = None) -> SampleInputs:
    """Noise (generator seeded ``seed``) and condition (generator seeded ``seed + 1``) for the
    global batch, sliced to this dp replica. Identical on every rank that shares a replica."""
    g_noise = torch.Generator().manual_seed(int(seed))
    g_cond = torch.Generator().manual_seed(int(seed) + 1)
    noise = torch.randn(latent_shape(model.cfg, grid, batch), generator=g_noise)
    cond = model.make_condition(batch, g_cond, grid)
    rows = dp_slice(batch, ctx)
    cond = cond_rows(cond, rows)
    return SampleInputs(noise[rows], cond, model.null_condition(cond), rows)


@torch.no_grad()
def generate(model: DiTBase, ctx: ParallelContext | None = None, *, grid: Sequence[int], batch: int = 1, steps: int = 50,
             guidance_scale: float = 1.0, seed: int = 0, shift: float = 1.0, backend: str = "auto",
             inputs: SampleInputs | None = None,
             callback: Callable[[int, torch.Tensor], None] | None = None,
             step_cache: StepCache | None = None) -> torch.Tensor:
    """Sample latents for this rank's dp replica: [b, C, F, H, W] float32, the same on every
    rank of the replica (gathered over the sequence group at the end). The loop itself runs
    on the local token shard; ``callback(step, x_local)`` sees the local shard after each step.
    ``ctx=None`` is the single-process reference. ``step_cache``: a fresh step cache for
    this run (it records the steps it computed and skipped)."""
    runner = ShardedDiT(model, ctx, grid=grid, backend=backend)
    if inputs is None:
        inputs = make_inputs(model, grid, batch, seed, ctx)
    x_local = runner.shard_latents(inputs.noise)

    def velocity(x: torch.Tensor, sigma: float) -> torch.Tensor:
        return runner.velocity(x, sigma * NUM_TRAIN_TIMESTEPS, inputs.cond, guidance_scale=guidance_scale,
                               null_cond=inputs.null_cond, step_cache=step_cache)

    x_local = euler_sample(velocity, x_local, flow_sigmas(steps, shift), callback, step_cache=step_cache)
    return runner.gather_latents(x_local, channels=model.cfg.out_dim)
