"""The model over a ParallelContext: sequence sharding, CFG parallel, data parallel.

* Sequence: the patchified latent tokens are split over the sequence group with
  ``ctx.shard_sequence`` (chunk index = ``ring_i*ulysses + ulysses_i``, tail zero-padded);
  RoPE angles come from each shard's *global* token indices; attention runs through
  ``usp_attention``; outputs are gathered with ``ctx.gather_sequence`` (padding dropped).
* CFG parallel (``cfg == 2``): cfg rank 0 runs the conditional pass, cfg rank 1 the
  unconditional one (null condition); the two velocities are exchanged over the cfg group and
  combined as ``uncond + g * (cond - uncond)``; both halves carry on with the same result.
  Without CFG parallel (``cfg == 1``, or no ctx) both passes run as one doubled batch.
* Data parallel: each dp replica takes its slice of the global batch (:func:`dp_slice`).

Everything also works with ``ctx=None`` (one process, no torch.distributed): that *is* the
unsharded reference.
"""

from __future__ import annotations

from typing import Sequence

import torch
import torch.distributed as dist

from sporch.orchestrator.contract.parallel import runs_cfg
from sporch.runtime.parallel import ParallelContext

from .base import DiTBase, batch_timesteps, patchify, unpatchify
from .cache import StepCache
from .condition import Condition, cond_cat

def replica_rows(n: int, ctx: ParallelContext | None = None) -> range:
    """This dp replica's share of ``n`` rows (contiguous; uneven split allowed, the first
    replicas get one more; with fewer rows than replicas the last ones get none)."""
    if ctx is None or ctx.dp == 1:
        return range(n)
    base, extra = divmod(n, ctx.dp)
    i = ctx.dp_rank
    start = i * base + min(i, extra)
    return range(start, start + base + (1 if i < extra else 0))


def dp_slice(batch: int, ctx: ParallelContext | None = None) -> slice:
    """This dp replica's rows of a global batch (:func:`replica_rows`; every replica needs one)."""
    if ctx is not None and batch < ctx.dp:
        raise ValueError(f"global batch {batch} is smaller than dp={ctx.dp}")
    rows = replica_rows(batch, ctx)
    return slice(rows.start, rows.stop)


def cfg_combine(cond: torch.Tensor, uncond: torch.Tensor, scale: float) -> torch.Tensor:
    cond, uncond = cond.float(), uncond.float()
    return uncond + scale * (cond - uncond)


def recorded_split(ctx: ParallelContext, grid: Sequence[int], cfg) -> tuple[int, tuple[int, ...]] | None:
    """The sequence padding and head split the planner recorded for this run, as
    ``(tokens_per_rank, q_heads_per_rank)`` from ``plan.sequence`` and ``plan.heads`` of the
    context's Plan (None for a context without one). The runtime follows the record rather than
    deciding again; a record that does not describe this model, grid and layout (a hand-edited
    or stale plan.json) is refused in one line."""
    plan = ctx.plan
    if plan is None:
        return None
    seq, heads = plan.sequence, plan.heads
    seq_len = int(grid[0]) * int(grid[1]) * int(grid[2])
    if (list(seq.grid) != list(grid) or seq.seq_len != seq_len or seq.split != "padded"
            or seq.degree != ctx.sequence_size or seq.tokens_per_rank * seq.degree < seq_len):
        raise ValueError(f"plan.sequence records {seq.seq_len} tokens (grid {list(seq.grid)}, split {seq.split!r}) "
                         f"as {seq.tokens_per_rank} per rank over {seq.degree} ranks, but this run pads grid "
                         f"{list(grid)} ({seq_len} tokens) over {ctx.sequence_size} sequence ranks: re-plan the job "
                         "(sporch plan)")
    counts = tuple(int(c) for c in heads.q_heads_per_rank)
    if (heads.num_heads, heads.num_kv_heads) != (cfg.num_heads, cfg.num_kv_heads) or len(counts) != ctx.ulysses \
            or sum(counts) != cfg.num_heads or min(counts) < 1:
        raise ValueError(f"plan.heads records {heads.num_heads} query / {heads.num_kv_heads} KV heads split "
                         f"{list(counts)} over Ulysses ranks, but this model has {cfg.num_heads} / "
                         f"{cfg.num_kv_heads} over ulysses={ctx.ulysses}: re-plan the job (sporch plan)")
    return seq.tokens_per_rank, counts


class ShardedDiT:
    """A model bound to a ParallelContext (or None) and one latent token grid.

    ``grid``: the [f, h, w] token grid (``plan.sequence.grid``). ``seq_len`` = f*h*w.
    Token tensors are [B, N, C*pt*ph*pw]; "local" ones are this rank's padded chunk.
    """

    def __init__(self, model: DiTBase, ctx: ParallelContext | None = None, *, grid: Sequence[int], backend: str = "auto") -> None:
        self.model = model
        self.cfg = model.cfg
        self.ctx = ctx
        self.grid = tuple(int(g) for g in grid)
        self.seq_len = self.grid[0] * self.grid[1] * self.grid[2]
        self.backend = backend
        if ctx is not None and ctx.cfg not in (1, 2):
            raise ValueError(f"cfg parallel degree must be 1 or 2, got {ctx.cfg}")
        if ctx is not None and ctx.cfg == 2 and not self.cfg.uses_cfg:
            raise ValueError(f"model {self.cfg.preset or ''} is guidance-distilled (one pass per step, "
                             "guidance_scale is its guidance input): set parallel.cfg=1")
        #: query heads per Ulysses rank as the Plan recorded them (None: no Plan, the contract's rule)
        self.head_counts: tuple[int, ...] | None = None
        if ctx is None:
            self.local_len = self.seq_len
            self.token_index = torch.arange(self.seq_len)
        else:
            recorded = recorded_split(ctx, self.grid, model.cfg)
            if recorded is None:  # a context without a Plan (tests, tools): the contract's rule
                self.local_len = ctx.local_len(self.seq_len)
            else:
                self.local_len, self.head_counts = recorded
            start = ctx.sequence_rank * self.local_len
            self.token_index = torch.arange(start, start + self.local_len)

    @property
    def sharded(self) -> bool:
        return self.ctx is not None and self.ctx.sequence_size > 1

    # -- tokens ----------------------------------------------------------------------------
    def shard(self, tokens: torch.Tensor) -> torch.Tensor:
        """Full tokens [B, S, F] -> this rank's chunk [B, local_len, F]."""
        if self.ctx is None:
            return tokens
        return self.ctx.shard_sequence(tokens, dim=1, local_len=self.local_len)

    def gather(self, local: torch.Tensor) -> torch.Tensor:
        """This rank's chunk -> full tokens [B, S, F] (padding removed), on every rank."""
        if self.ctx is None:
            return local
        return self.ctx.gather_sequence(local, dim=1, seq_len=self.seq_len)

    def shard_latents(self, latents: torch.Tensor) -> torch.Tensor:
        """Full latents [B, C, F, H, W] -> this rank's token chunk, on the model's device."""
        tokens, grid = patchify(latents.to(self.model.device), self.cfg.patch)
        if tuple(grid) != self.grid:
            raise ValueError(f"latents give token grid {grid}, expected {self.grid}")
        return self.shard(tokens)

    def gather_latents(self, local: torch.Tensor, channels: int | None = None) -> torch.Tensor:
        c = self.cfg.out_dim if channels is None else channels
        return unpatchify(self.gather(local), self.grid, self.cfg.patch, c)

    # -- model -----------------------------------------------------------------------------
    def _run(self, x_local: torch.Tensor, timestep: torch.Tensor, cond: Condition,
             guidance: float | None = None, step_cache: StepCache | None = None) -> torch.Tensor:
        return self.model.forward_tokens(
            x_local, timestep, cond, grid=self.grid, token_index=self.token_index,
            seq_len=self.seq_len, ctx=self.ctx, backend=self.backend, guidance=guidance,
            step_cache=step_cache, head_counts=self.head_counts,
        )

    @torch.no_grad()
    def velocity(self, x_local: torch.Tensor, timestep: torch.Tensor | float, cond: Condition, *,
                 guidance_scale: float = 1.0, null_cond: Condition | None = None,
                 cfg: bool | None = None, step_cache: StepCache | None = None) -> torch.Tensor:
        """The model's prediction on this rank's chunk, with classifier-free guidance when ``cfg``
        (a job passes the Plan's ``workload.cfg_enabled``, whatever this call's scale: WanPipeline's
        low-noise expert's ``guidance_scale_2`` combines the branches that ``guidance_scale`` turned
        on; None, for callers without a Plan: the planner's rule,
        :func:`~sporch.orchestrator.contract.parallel.runs_cfg`). A guidance-distilled model (Flux.1) runs one pass instead and
        takes ``guidance_scale`` as its embedded guidance input (Flux.1-schnell has none and
        needs ``guidance_scale <= 1``). ``timestep`` in model units (sigma * 1000), scalar,
        [B], or [B, seq_len] (one per token of the whole sequence: Wan2.2 TI2V).
        ``step_cache``: this run's step cache (one call per step; its skip decision is
        reduced over the sequence and cfg groups). Returns float32 [B, local_len, patch_out];
        identical on both halves of a cfg group."""
        b = x_local.shape[0]
        t = batch_timesteps(timestep, b)
        if not self.cfg.uses_cfg:
            if self.cfg.guidance_embed:
                return self._run(x_local, t, cond, guidance=guidance_scale, step_cache=step_cache).float()
            if guidance_scale > 1.0:
                raise ValueError(f"model {self.cfg.preset or ''} is guidance-distilled without a guidance "
                                 f"input: set workload.guidance_scale <= 1 (got {guidance_scale:g})")
        if not (runs_cfg(guidance_scale, distilled=not self.cfg.uses_cfg) if cfg is None else cfg):
            return self._run(x_local, t, cond, step_cache=step_cache).float()
        if null_cond is None:
            null_cond = self.model.null_condition(cond)
        ctx = self.ctx
        if ctx is not None and ctx.cfg == 2:
            mine = cond if ctx.cfg_rank == 0 else null_cond
            out = self._run(x_local, t, mine, step_cache=step_cache).contiguous()
            parts = [torch.empty_like(out) for _ in range(2)]
            with ctx.guard(), ctx.collective("cfg_gather", "cfg", kind="all_gather"):
                dist.all_gather(parts, out, group=ctx.cfg_group)
            stats = getattr(ctx, "comm_stats", None)
            if stats is not None:  # this rank's half goes to the other cfg rank
                stats.add("cfg_gather", out.numel() * out.element_size())
            return cfg_combine(parts[0], parts[1], guidance_scale)
        both = self._run(torch.cat([x_local, x_local]), torch.cat([t, t]), cond_cat(cond, null_cond),
                         step_cache=step_cache)
        return cfg_combine(both[:b], both[b:], guidance_scale)

    @torch.no_grad()
    def forward(self, latents: torch.Tensor, timestep: torch.Tensor | float, cond: Condition, *,
                guidance_scale: float = 1.0, null_cond: Condition | None = None) -> torch.Tensor:
        """Full latents [B, C, F, H, W] (whole on every rank) -> full (gathered) velocity
        latents, float32. The inputs are this dp replica's samples."""
        x_local = self.shard_latents(latents)
        v = self.velocity(x_local, timestep, cond, guidance_scale=guidance_scale, null_cond=null_cond)
        return self.gather_latents(v)

