"""The parallel context: the rank's place in the (dp, cfg, ring, ulysses) mesh, and its groups.

Built after ``torch.distributed`` is initialised, from a Plan or from sizes::

    ctx = ParallelContext.from_plan(plan)
    ctx = ParallelContext.from_layout(dp=1, cfg=2, ring=2, ulysses=2)

Rank order is the planner's (orchestrator/contract/plan.py)::

    rank = ((dp_i * cfg + cfg_i) * ring + ring_i) * ulysses + ulysses_i

and the groups are exactly ``Layout.groups(dim)`` (the single source of truth), created
on every rank in the same order. A rank's chunk of the sequence is its position in the
sequence group, ``ring_i * ulysses + ulysses_i``.

There are no process-global singletons: pass the context to whatever needs it.

Collectives: ``ctx.watchdog`` (a :class:`sporch.runtime.watchdog.thread.Watchdog`, set by launch.py; None
elsewhere) watches every collective issued through ``with ctx.collective(name, dim, kind=...)``:
one that does not complete within the collective timeout names the ranks that never arrived.

Health: any exception raised inside a context operation (``ctx.guard()``, used by
``usp_attention``, ``shard_sequence`` and ``gather_sequence``) marks the context broken
(``ctx.healthy`` is False, ``ctx.broken_reason`` says why); every later operation refuses
with :class:`ContextBroken`. A failed collective leaves peers in an unknown state, so the
groups must not be reused: tear the job down (``destroy_process_group``) and start again.
"""

from __future__ import annotations

import contextlib
from contextlib import nullcontext
from typing import Any, Iterator, Sequence

import torch
import torch.distributed as dist

from sporch.orchestrator.contract.parallel import DIMS, GROUP_DIMS, head_split, padded_length
from sporch.orchestrator.contract.plan import Layout, Plan

__all__ = ["ParallelContext", "ContextBroken", "head_offsets"]


#: ``broken_reason`` of a context whose groups were destroyed (:meth:`ParallelContext.close`).
CLOSED = "closed: its process groups were destroyed"


class ContextBroken(RuntimeError):
    """The context saw a failure earlier; its groups must not be reused."""


def head_offsets(counts: Sequence[int]) -> list[int]:
    """Start offset of each part, given the part sizes."""
    out, acc = [], 0
    for c in counts:
        out.append(acc)
        acc += c
    return out


class ParallelContext:
    """This rank's coordinates and process groups on the dp x cfg x ring x ulysses mesh.

    Attributes: ``layout`` (:class:`Layout`), ``rank``, ``world_size``, ``device``,
    ``dp_rank``/``cfg_rank``/``ring_rank``/``ulysses_rank`` (coordinates),
    ``sequence_rank`` (position in the sequence group), ``sequence_size`` (ring x ulysses),
    ``plan`` (or None). Groups: ``group(dim)`` and ``group_ranks(dim)`` for dim in
    dp, cfg, ring, ulysses, sequence; shortcuts ``dp_group``, ``cfg_group``, ``ring_group``,
    ``ulysses_group``, ``sequence_group``. ``mesh``: a 4-D torch DeviceMesh over the same
    groups (dim names dp, cfg, ring, ulysses), or None where this torch cannot build one.
    """

    def __init__(self, layout: Layout, *, plan: Plan | None = None, device: torch.device | str | None = None,
                 _groups: dict[str, Any] | None = None, _group_ranks: dict[str, list[int]] | None = None) -> None:
        if not dist.is_available() or not dist.is_initialized():
            raise RuntimeError("ParallelContext needs torch.distributed initialised first "
                               "(torch.distributed.init_process_group)")
        world = dist.get_world_size()
        if layout.world_size != world:
            raise ValueError(f"layout {layout.describe()} needs {layout.world_size} ranks, "
                             f"torch.distributed has {world}")
        self.layout = layout
        self.plan = plan
        self.rank = dist.get_rank()
        self.world_size = world
        self.device = torch.device(device) if device is not None else _default_device()
        c = layout.coords(self.rank)
        self.dp_rank, self.cfg_rank, self.ring_rank, self.ulysses_rank = c["dp"], c["cfg"], c["ring"], c["ulysses"]
        self.sequence_rank = layout.sequence_index(self.rank)
        self.sequence_size = layout.sequence_degree
        self.healthy = True
        self.broken_reason: str | None = None
        #: A sporch.runtime.attention.CommStats that collectives of the model add their bytes to, or None.
        self.comm_stats: Any = None
        #: The rank's sporch.runtime.watchdog.thread.Watchdog over its collectives, or None (not watched).
        self.watchdog: Any = None
        #: A sporch.runtime.models.WeightCache the points of a pack share (one weight load per
        #: model and dtype), or None: every build loads or draws its weights.
        self.weight_cache: Any = None
        if _groups is None:
            _groups, _group_ranks = _make_groups(layout, self.rank)
        self._groups = _groups
        self._group_ranks = _group_ranks or {}
        self._mesh: Any = None
        self._mesh_tried = False

    # -- construction ---------------------------------------------------------------
    @classmethod
    def from_layout(cls, dp: int = 1, cfg: int = 1, ring: int = 1, ulysses: int = 1, *,
                    device: torch.device | str | None = None) -> "ParallelContext":
        """Collective: every rank must call it, with the same sizes."""
        return cls(Layout(dp=dp, cfg=cfg, ring=ring, ulysses=ulysses), device=device)

    @classmethod
    def from_plan(cls, plan: Plan, *, device: torch.device | str | None = None) -> "ParallelContext":
        """Collective: every rank must call it, with the same plan."""
        layout = plan.layout
        if plan.groups:
            expected = layout.all_groups()
            for dim, groups in plan.groups.items():
                if dim in expected and [list(g) for g in groups] != expected[dim]:
                    raise ValueError(f"plan.groups[{dim!r}] does not match the layout's rank order")
        return cls(layout, plan=plan, device=device)

    # -- sizes and groups ------------------------------------------------------------
    @property
    def dp(self) -> int:
        return self.layout.dp

    @property
    def cfg(self) -> int:
        return self.layout.cfg

    @property
    def ring(self) -> int:
        return self.layout.ring

    @property
    def ulysses(self) -> int:
        return self.layout.ulysses

    def size(self, dim: str) -> int:
        if dim == "sequence":
            return self.sequence_size
        return getattr(self.layout, dim)

    def coord(self, dim: str) -> int:
        if dim == "sequence":
            return self.sequence_rank
        return self.layout.coords(self.rank)[dim]

    def group(self, dim: str):
        """The torch ProcessGroup of this rank along ``dim``."""
        if dim not in GROUP_DIMS:
            raise ValueError(f"unknown dimension {dim!r}; expected one of {GROUP_DIMS}")
        return self._groups[dim]

    def group_ranks(self, dim: str) -> list[int]:
        """Global ranks of this rank's group along ``dim``, in group order."""
        if dim not in GROUP_DIMS:
            raise ValueError(f"unknown dimension {dim!r}; expected one of {GROUP_DIMS}")
        return list(self._group_ranks[dim])

    dp_group = property(lambda self: self.group("dp"))
    cfg_group = property(lambda self: self.group("cfg"))
    ring_group = property(lambda self: self.group("ring"))
    ulysses_group = property(lambda self: self.group("ulysses"))
    sequence_group = property(lambda self: self.group("sequence"))

    @property
    def mesh(self):
        """A torch ``DeviceMesh`` (dims dp, cfg, ring, ulysses) over this context's groups,
        or None if this torch cannot build one from existing groups."""
        if not self._mesh_tried:
            self._mesh_tried = True
            try:
                from torch.distributed.device_mesh import DeviceMesh

                ranks = torch.arange(self.world_size, dtype=torch.int).reshape(
                    self.layout.dp, self.layout.cfg, self.layout.ring, self.layout.ulysses)
                self._mesh = DeviceMesh.from_group([self._groups[d] for d in DIMS], self.device.type,
                                                   mesh=ranks, mesh_dim_names=DIMS)
            except Exception:  # noqa: BLE001 - DeviceMesh is a convenience, never required
                self._mesh = None
        return self._mesh

    def heads_per_rank(self, num_heads: int) -> list[int]:
        """Query heads per Ulysses rank (uneven when ``num_heads % ulysses != 0``)."""
        return head_split(num_heads, self.layout.ulysses)

    def local_len(self, seq_len: int) -> int:
        """Tokens per rank after padding: ``ceil(seq_len / sequence_size)``."""
        return self.padded_len(seq_len) // self.sequence_size

    def padded_len(self, seq_len: int) -> int:
        return padded_length(seq_len, self.sequence_size)

    def close(self) -> None:
        """Destroy this context's process groups (not the world's): a pack of points re-forms
        its groups per point from the same world, and leaks none. Collective in effect (every
        rank of a group must close it); the context is unusable afterwards."""
        if not self.healthy and self.broken_reason == CLOSED:
            return
        seen: set[int] = set()
        for pg in list(self._groups.values()):
            if pg is None or pg is dist.group.WORLD or id(pg) in seen:
                continue
            seen.add(id(pg))
            dist.destroy_process_group(pg)
        self._groups, self._mesh, self._mesh_tried = {}, None, True
        self.mark_broken(CLOSED)

    # -- health -----------------------------------------------------------------------
    def mark_broken(self, reason: BaseException | str) -> None:
        self.healthy = False
        if self.broken_reason is None:
            self.broken_reason = reason if isinstance(reason, str) else f"{type(reason).__name__}: {reason}"

    def ensure_healthy(self) -> None:
        if not self.healthy:
            raise ContextBroken(f"rank {self.rank}: this ParallelContext failed earlier ({self.broken_reason}); "
                                "its process groups must not be reused - tear down and restart the job")

    @contextlib.contextmanager
    def guard(self) -> Iterator["ParallelContext"]:
        """Refuse if broken; mark broken if the body raises (and re-raise)."""
        self.ensure_healthy()
        try:
            yield self
        except BaseException as exc:
            self.mark_broken(exc)
            raise

    def collective(self, name: str, dim: str, *, kind: str, layer: int | None = None):
        """A context manager around one collective over this rank's ``dim`` group: the watchdog
        (when there is one) knows the rank is in it (``name`` what for, ``kind`` which call,
        ``layer`` where in the model); a no-op without a watchdog."""
        wd = self.watchdog
        if wd is None:
            return _NO_WATCH
        return wd.collective(name, self._group_ranks[dim], kind=kind, group=dim, layer=layer)

    # -- sequence sharding -----------------------------------------------------------
    def shard_sequence(self, x: torch.Tensor, dim: int = 1, local_len: int | None = None) -> torch.Tensor:
        """This rank's contiguous chunk of ``x`` along ``dim`` (chunk index = ``sequence_rank``),
        the tail zero-padded to ``local_len`` tokens per rank: the Plan's record
        (``plan.sequence.tokens_per_rank``) where the caller has one, else
        ``ceil(len / sequence_size)``. Local, no comm."""
        with self.guard():
            dim = dim % x.dim()
            n = x.shape[dim]
            local = self.local_len(n) if local_len is None else int(local_len)
            if local * self.sequence_size < n:
                raise ValueError(f"{local} tokens per rank over {self.sequence_size} sequence ranks cannot hold "
                                 f"the {n} tokens of the sequence")
            start = self.sequence_rank * local
            stop = min(start + local, n)
            piece = x.narrow(dim, min(start, n), max(0, stop - start))
            if piece.shape[dim] < local:
                pad_shape = list(x.shape)
                pad_shape[dim] = local - piece.shape[dim]
                piece = torch.cat([piece, x.new_zeros(pad_shape)], dim=dim)
            return piece.contiguous()

    def gather_sequence(self, y: torch.Tensor, dim: int = 1, seq_len: int | None = None) -> torch.Tensor:
        """The full tensor along ``dim`` from every rank of the sequence group (all-gather),
        with the padding removed when ``seq_len`` is given. Every rank gets the result."""
        with self.guard():
            dim = dim % y.dim()
            if self.sequence_size == 1:
                full = y
            else:
                y = y.contiguous()
                parts = [torch.empty_like(y) for _ in range(self.sequence_size)]
                with self.collective("gather_sequence", "sequence", kind="all_gather"):
                    dist.all_gather(parts, y, group=self.sequence_group)
                full = torch.cat(parts, dim=dim)
            if seq_len is not None:
                if seq_len > full.shape[dim]:
                    raise ValueError(f"seq_len {seq_len} is longer than the gathered sequence {full.shape[dim]}")
                full = full.narrow(dim, 0, seq_len)
            return full

    def __repr__(self) -> str:
        return (f"ParallelContext(rank={self.rank}, {self.layout.describe()}, dp_rank={self.dp_rank}, "
                f"cfg_rank={self.cfg_rank}, ring_rank={self.ring_rank}, ulysses_rank={self.ulysses_rank}, "
                f"healthy={self.healthy})")


_NO_WATCH = nullcontext()


def _default_device() -> torch.device:
    backend = dist.get_backend()
    if torch.cuda.is_available() and "nccl" in str(backend):
        return torch.device("cuda", torch.cuda.current_device())
    return torch.device("cpu")


def _make_groups(layout: Layout, rank: int) -> tuple[dict[str, Any], dict[str, list[int]]]:
    """Create every group of every dimension, in the same order on every rank (new_group is
    collective over the world), keeping this rank's. The WORLD group stands in where a
    dimension's group is the whole world."""
    groups: dict[str, Any] = {}
    ranks: dict[str, list[int]] = {}
    for dim in GROUP_DIMS:
        for members in layout.groups(dim):
            if len(members) == layout.world_size:
                pg = dist.group.WORLD
            else:
                pg = dist.new_group(members)
            if rank in members:
                groups[dim] = pg
                ranks[dim] = list(members)
    return groups, ranks



def replica_rows(n: int, ctx: ParallelContext | None = None) -> range:
    """This dp replica's share of ``n`` rows or prompts (contiguous; uneven split allowed, the first
    replicas get one more; with fewer rows than replicas the last ones get none)."""
    if ctx is None or ctx.dp == 1:
        return range(n)
    base, extra = divmod(n, ctx.dp)
    i = ctx.dp_rank
    start = i * base + min(i, extra)
    return range(start, start + base + (1 if i < extra else 0))
