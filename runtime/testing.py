"""Run a function on N real ``torch.distributed`` processes (gloo on CPU), for tests and benches.

    from sporch.runtime.testing import run_distributed

    def work(n):                      # module level: the child processes import it
        import torch.distributed as dist
        return dist.get_rank() * n

    run_distributed(work, 4, 10)      # -> [0, 10, 20, 30]

Each rank is a process of its own (``spawn``; where a :class:`sporch.runtime.rank_pool.RankPool`
is serving, one of its workers, started once and cleaned between calls) with ``torch.distributed`` already initialised
(gloo, a FileStore in a private temporary directory, so no TCP port is picked or raced for),
``torch.set_num_threads(threads)`` applied, and ``fn(*args, **kwargs)`` called. The rank
is ``torch.distributed.get_rank()``. Return values are pickled back and returned as a list
indexed by rank.

Failure never hangs the caller: if any rank raises, the other ranks are terminated and
:class:`RankError` is raised in the parent, naming the rank that failed *first* (later
failures are usually the consequence: a peer's connection closed) and carrying its
traceback text; the original exception, when it can be unpickled, is ``err.original``
and the ``__cause__``. If ``fn`` does not finish on every rank within ``timeout`` seconds of
the last rank joining the process group, every rank is terminated and
:class:`DistributedTimeout` (a ``TimeoutError``) names the ranks that had not finished.
Starting the ranks (a process each, the imports, the join) has its own bound,
:data:`STARTUP_TIMEOUT_S`, so that how fast a loaded machine starts Python and torch is not
counted against ``timeout``. Collectives inside the ranks use ``timeout`` too
(``init_process_group``).

Stable API: ``run_distributed``, ``RankError``, ``DistributedTimeout``, ``init_env``, ``plan_for``
(a complete Plan for a layout, a model dict and a grid, without the planner) and ``preset_model``
(a preset's ``plan.model`` dict, its config changed where asked, as the planner records it).
"""

from __future__ import annotations

import multiprocessing as mp
import os
import pickle
import shutil
import tempfile
import time
import traceback
from typing import Any, Callable, Mapping, Sequence

from sporch.orchestrator.models.families import find_family_preset, preset_shape, sequence_split
from sporch.orchestrator.contract.parallel import runs_cfg
from sporch.orchestrator.contract.plan import Layout, Plan
from sporch.orchestrator.contract import sections
from sporch.runtime.distributed import join_and_init
from sporch.runtime.rank_pool import serving_pool

#: How long the ranks may take to start (a process each, Python and torch imports, joining the
#: process group) before ``run_distributed``'s own timeout begins.
STARTUP_TIMEOUT_S = 300.0

__all__ = ["run_distributed", "RankError", "DistributedTimeout", "init_env", "plan_for", "preset_model"]

#: The workload ``plan_for`` fills in where not given.
DEFAULT_WORKLOAD: dict[str, Any] = {
    "kind": "verify", "batch": 1, "frames": None, "height": None, "width": None, "seq_len": None, "steps": 2,
    "guidance_scale": 1.0, "cfg_enabled": False, "dtype": "float32", "warmup": 0, "repeat": 1, "seed": 0,
}


def preset_model(name: str = "tiny", **config: Any) -> dict[str, Any]:
    """``plan.model`` of preset ``name`` (its family, class, diffusers config with ``config``'s keys
    changed, its shape from that config), as the planner records a preset without overrides: for
    tests and benches that build a Plan without the planner (:func:`plan_for`)."""
    found = find_family_preset(name)
    if found is None:
        raise KeyError(f"unknown preset {name!r}")
    fam, preset = found
    conf = {**dict(preset.config), **config}
    shape = {**preset_shape(fam, preset), **fam.shape(conf)}
    for key, value in preset.shape_overrides.items():
        shape[key] = value
    guided = {} if fam.cfg else {"distilled": True, "guidance_embed": bool(conf.get("guidance_embeds", True))}
    return {"preset": preset.name, **shape, "mlp_ratio": round(shape["ffn_dim"] / shape["hidden"], 6),
            "family": fam.name, "diffusers_class": fam.classes[0], "diffusers_config": conf,
            "boundary_ratio": preset.boundary_ratio, "expand_timesteps": preset.expand_timesteps, **guided}


def plan_for(layout: Layout, model: Mapping[str, Any], grid: Sequence[int] = (1, 1, 8),
             workload: Mapping[str, Any] | None = None, name: str = "test", shard_weights: str = "none") -> Plan:
    """A complete Plan on one emulated node (world = layout) for a ``plan.model`` dict
    (:func:`preset_model`) and a token grid; ``workload`` keys override :data:`DEFAULT_WORKLOAD`;
    ``shard_weights``: the placement (none, sequence, world)."""
    degree = {"none": 1, "sequence": layout.sequence_degree, "world": layout.world_size}[shard_weights]
    wl = {**DEFAULT_WORKLOAD, **(workload or {})}
    m = sections.ModelSection.from_dict(dict(model))
    wl["cfg_enabled"] = runs_cfg(wl["guidance_scale"], distilled=m.distilled)
    return Plan(layout=layout, world_size=layout.world_size, nodes=1, gpus_per_node=layout.world_size,
                ranks=Plan.rank_table(layout, layout.world_size), groups=layout.all_groups(),
                cluster=sections.ClusterSpec(name="test", gpus_per_node=layout.world_size),
                job=sections.JobSection(name=name, output_dir="", entrypoint=None, time="00:10:00", source=None),
                model=m, workload=sections.WorkloadSection(**wl),
                sequence=sections.SequenceSection.build(grid[0] * grid[1] * grid[2], list(grid), layout.sequence_degree,
                                                        *sequence_split(m)),  # as the planner records it
                heads=sections.HeadsSection.build(m.num_heads, m.num_kv_heads, layout.ulysses),
                placement=sections.PlacementSection(shard_weights=shard_weights, shard_degree=degree))


class RankError(RuntimeError):
    """A rank raised. ``rank``: the first rank that failed; ``original``: its exception
    (``None`` if it could not be unpickled); ``remote_traceback``: its traceback text;
    ``failures``: ``{rank: one-line summary}`` for every rank that failed."""

    def __init__(self, rank: int, message: str, remote_traceback: str = "", original: BaseException | None = None,
                 failures: dict[int, str] | None = None) -> None:
        super().__init__(message)
        self.rank = rank
        self.original = original
        self.remote_traceback = remote_traceback
        self.failures = dict(failures or {})


class DistributedTimeout(TimeoutError):
    """The job did not finish in time; ``pending``: the ranks that had not returned."""

    def __init__(self, message: str, pending: list[int]) -> None:
        super().__init__(message)
        self.pending = list(pending)


# --------------------------------------------------------------------------------------
# child side
# --------------------------------------------------------------------------------------

def init_env(rank: int, world_size: int, init_method: str, *, backend: str = "gloo", timeout: float = 120.0,
             threads: int | None = 1) -> None:
    """Initialise ``torch.distributed`` in this process (what every spawned rank does first)."""
    import torch

    if threads is not None:
        torch.set_num_threads(threads)
    os.environ.setdefault("RANK", str(rank))
    os.environ.setdefault("WORLD_SIZE", str(world_size))
    os.environ.setdefault("LOCAL_RANK", str(rank))
    join_and_init(backend, init_method, rank, world_size, max(1.0, float(timeout)), join_timeout_s=STARTUP_TIMEOUT_S)


def _write_atomic(path: str, payload: Any) -> None:
    tmp = path + ".tmp"
    with open(tmp, "wb") as fh:
        pickle.dump(payload, fh, protocol=pickle.HIGHEST_PROTOCOL)
    os.replace(tmp, path)


def _worker(rank: int, world_size: int, workdir: str, fn: Callable[..., Any], args: tuple, kwargs: dict,
            backend: str, timeout: float, threads: int | None) -> None:
    result_path = os.path.join(workdir, f"rank{rank}.result")
    error_path = os.path.join(workdir, f"rank{rank}.error")
    try:
        init_env(rank, world_size, "file://" + os.path.join(workdir, "store"), backend=backend,
                 timeout=timeout, threads=threads)
        open(os.path.join(workdir, f"rank{rank}.ready"), "w").close()
        value = fn(*args, **kwargs)
        _write_atomic(result_path, value)
    except BaseException as exc:  # noqa: BLE001 - everything is reported to the parent
        when = time.time()
        tb = traceback.format_exc()
        try:
            blob = pickle.dumps(exc)
        except Exception:  # noqa: BLE001 - unpicklable exceptions still report their text
            blob = None
        try:
            _write_atomic(error_path, {"time": when, "type": type(exc).__name__, "message": str(exc),
                                       "traceback": tb, "exception": blob})
        finally:
            # Skip destroy_process_group and atexit handlers: peers may be gone and gloo
            # teardown can block; the parent is about to terminate everyone anyway.
            os._exit(1)
    try:
        import torch.distributed as dist

        if dist.is_initialized():
            dist.destroy_process_group()
    except Exception:  # noqa: BLE001 - the result is already written
        pass


# --------------------------------------------------------------------------------------
# parent side
# --------------------------------------------------------------------------------------

def _read(path: str) -> Any:
    with open(path, "rb") as fh:
        return pickle.load(fh)


def _stop(procs: list) -> None:
    for p in procs:
        if p.is_alive():
            p.terminate()
    deadline = time.monotonic() + 5.0
    for p in procs:
        p.join(max(0.0, deadline - time.monotonic()))
    for p in procs:
        if p.is_alive():
            p.kill()
            p.join(2.0)


class _Spawned:
    """Fresh processes, one per rank (run_distributed where no pool is serving)."""

    def __init__(self, ctx: Any, rank_args: list[tuple]) -> None:
        self.procs: list = []
        try:
            for args in rank_args:
                p = ctx.Process(target=_worker, name=f"sporch-rank{args[0]}", args=args, daemon=True)
                p.start()
                self.procs.append(p)
        except BaseException:
            _stop(self.procs)
            raise

    def is_alive(self, r: int) -> bool:
        return self.procs[r].is_alive()

    def exitcode(self, r: int) -> int | None:
        return self.procs[r].exitcode

    def returned(self, r: int) -> bool:
        return not self.procs[r].is_alive() and self.procs[r].exitcode == 0

    def release(self) -> None:
        for p in self.procs:
            p.join(5.0)
        _stop(self.procs)

    def stop(self) -> None:
        _stop(self.procs)


def run_distributed(fn: Callable[..., Any], world_size: int, *args: Any, timeout: float = 120.0,
                    backend: str = "gloo", threads: int | None = 1, start_method: str = "spawn",
                    **kwargs: Any) -> list[Any]:
    """Run ``fn(*args, **kwargs)`` on ``world_size`` ranks; return the results, by rank.

    ``fn`` must be importable by the children (defined at module level). ``timeout`` bounds
    ``fn``'s run, from the moment every rank has joined the process group, and every collective
    inside it; starting the ranks is bounded by :data:`STARTUP_TIMEOUT_S`. ``threads`` is
    ``torch.set_num_threads`` in each rank (``None``: leave torch's default). The ranks run on
    the serving :class:`~sporch.runtime.rank_pool.RankPool`'s workers when there is one (and
    ``start_method`` is ``spawn``), else on fresh processes.
    """
    if world_size < 1:
        raise ValueError(f"world_size must be >= 1, got {world_size}")
    workdir = tempfile.mkdtemp(prefix="sporch-dist-")
    rank_args = [(rank, world_size, workdir, fn, args, kwargs, backend, timeout, threads) for rank in range(world_size)]
    pool = serving_pool() if start_method == "spawn" else None
    ranks: Any = None
    try:
        ranks = pool.start(_worker, rank_args) if pool is not None else _Spawned(mp.get_context(start_method),
                                                                                  rank_args)
        _watch(ranks, workdir, world_size, fn, timeout)
        values = [_read(os.path.join(workdir, f"rank{r}.result")) for r in range(world_size)]
        ranks.release()
        return values
    finally:
        if ranks is not None:
            ranks.stop()
        shutil.rmtree(workdir, ignore_errors=True)


def _watch(ranks: Any, workdir: str, world_size: int, fn: Callable[..., Any], timeout: float) -> None:
    """Wait until every rank has written its result; raise RankError / DistributedTimeout (the
    ranks stopped) when one fails, dies, or the run overruns."""
    started = time.monotonic()
    deadline = None  # set once every rank is up: the run's own timeout counts from then
    done: set[int] = set()
    while True:
        failed = [r for r in range(world_size) if os.path.exists(os.path.join(workdir, f"rank{r}.error"))]
        died = [r for r in range(world_size)
                if r not in done and not ranks.is_alive(r) and ranks.exitcode(r) not in (0, None) and r not in failed]
        if failed or died:
            time.sleep(0.2)  # let near-simultaneous reports land, then pick the first
            failed = [r for r in range(world_size) if os.path.exists(os.path.join(workdir, f"rank{r}.error"))]
            ranks.stop()
            _raise_failure(workdir, ranks, world_size, failed, died)
        for r in range(world_size):
            if r not in done and ranks.returned(r) and os.path.exists(os.path.join(workdir, f"rank{r}.result")):
                done.add(r)
        if len(done) == world_size:
            return
        if deadline is None:
            up = {r for r in range(world_size) if os.path.exists(os.path.join(workdir, f"rank{r}.ready"))}
            if len(up) == world_size:
                deadline = time.monotonic() + timeout
            elif time.monotonic() > started + STARTUP_TIMEOUT_S:
                pending = sorted(set(range(world_size)) - up)
                ranks.stop()
                raise DistributedTimeout(
                    f"distributed run of {getattr(fn, '__qualname__', fn)!r}: ranks {pending} of {world_size} did "
                    f"not start within {STARTUP_TIMEOUT_S:g}s", pending)
        elif time.monotonic() > deadline:
            pending = sorted(set(range(world_size)) - done)
            ranks.stop()
            raise DistributedTimeout(
                f"distributed run of {getattr(fn, '__qualname__', fn)!r} on {world_size} ranks did not finish "
                f"within {timeout:g}s; ranks still running: {pending}", pending)
        time.sleep(0.01)


def _raise_failure(workdir: str, ranks: Any, world_size: int, failed: list[int], died: list[int]) -> None:
    reports: dict[int, dict] = {}
    for r in failed:
        try:
            reports[r] = _read(os.path.join(workdir, f"rank{r}.error"))
        except Exception:  # noqa: BLE001
            reports[r] = {"time": float("inf"), "type": "?", "message": "(unreadable error report)",
                          "traceback": "", "exception": None}
    if not reports:
        # A rank died without reporting (signal, os._exit, segfault): the first seen dead, not a
        # peer stopped afterwards.
        dead = [(r, ranks.exitcode(r)) for r in range(world_size) if ranks.exitcode(r) not in (0, None)]
        r, code = next(((d, c) for d, c in dead if d in died), dead[0] if dead else (-1, None))
        raise RankError(r, f"rank {r} died without reporting an error (exit code {code})",
                        failures={d: f"exit code {c}" for d, c in dead})
    first = min(reports, key=lambda r: (reports[r]["time"], r))
    rep = reports[first]
    original = None
    if rep.get("exception") is not None:
        try:
            original = pickle.loads(rep["exception"])
        except Exception:  # noqa: BLE001
            original = None
    summary = {r: f"{v['type']}: {v['message']}".splitlines()[0][:300] if v["message"] else v["type"]
               for r, v in sorted(reports.items())}
    others = ", ".join(f"rank {r}" for r in sorted(reports) if r != first)
    msg = f"rank {first} raised {rep['type']}: {rep['message']}"
    if others:
        msg += f"\n(also failed afterwards: {others})"
    msg += f"\n--- traceback of rank {first} ---\n{rep['traceback']}"
    err = RankError(first, msg, rep["traceback"], original, summary)
    if original is not None:
        raise err from original
    raise err
