"""Packed points (``python -m sporch.runtime.pack``): several points of one world in one launch.

Real rank processes (gloo on CPU, 2 ranks on clusters/local.yaml's 2-rank twin local_cli.local2,
the Slurm variables a task would get; they were 4), launched the way the pack's batch script does
(templates/campaign_pack.sbatch.j2): again after a failed launch, with the same attempt id, until
the runtime says nothing is left. That last answer ("nothing left") is decided before a rank opens
its world, from the point folders alone: :func:`nothing_left` asks ``sporch.runtime.pack.main`` for
it in this process, once per rank with that rank's environment, instead of a launch that starts
every rank (and its torch import) to return at once. The layouts that need 4 ranks (u4, r4, u2r2,
cfg2 x u2) re-formed point after point in one world: test_contexts_re_formed_per_point_leak_no_groups.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import uuid
from pathlib import Path

from sporch.orchestrator.config.cluster import find_cluster
from sporch.orchestrator.config.job import load_job
from sporch.orchestrator.contract.exit_codes import EXIT_FAILED, EXIT_OK, EXIT_PACK_FAILED
from sporch.orchestrator.plan.planner import make_plan
from sporch.orchestrator.submit.local_run import rank_environment
from tests.runtime.launch.local_cli import TINY, hooks_env, local2

LAYOUTS = {"u2": ["parallel.ulysses=2", "parallel.ring=1"], "r2": ["parallel.ulysses=1", "parallel.ring=2"],
           "cfg2": ["parallel.cfg=2", "parallel.ulysses=1", "parallel.ring=1"]}


def point(folder: Path, name: str, *overrides: str) -> Path:
    plan = make_plan(find_cluster(str(local2(folder / ".cluster"))), load_job(TINY, [f"name={name}", *overrides]))
    assert plan.world_size == 2
    d = folder / name
    d.mkdir(parents=True)
    (d / "plan.json").write_text(plan.to_json())
    return d


def launch(points: list[Path], attempt: str, env: dict | None = None) -> int:
    """One launch of the pack on its 2 rank processes; the exit code the batch script sees
    (srun's: the highest of the ranks')."""
    listing = points[0].parent / "pack.list"
    listing.write_text("".join(f"{p}\n" for p in points))
    plan = json.loads((points[0] / "plan.json").read_text())
    rendezvous = points[0].parent / f".rendezvous-{uuid.uuid4().hex[:8]}"
    procs = [subprocess.Popen([sys.executable, "-m", "sporch.runtime.pack", "--list", str(listing),
                               "--attempt", attempt],
                              env={**rank_environment(plan, r, rendezvous, "4242", points[0]), **(env or {})},
                              stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
             for r in range(plan["world_size"])]
    codes = [p.wait(timeout=600) for p in procs]
    return max(codes)


def nothing_left(points: list[Path], attempt: str) -> int:
    """The exit code a launch of the pack returns at once when nothing is left to run: what
    ``sporch.runtime.pack.main`` (the rank process's ``sys.exit(main())``) returns on every rank,
    each with its environment, asserted before a world opens; srun's code is the highest."""
    from sporch.runtime import pack

    listing = points[0].parent / "pack.list"
    listing.write_text("".join(f"{p}\n" for p in points))
    plan = json.loads((points[0] / "plan.json").read_text())
    rendezvous = points[0].parent / ".rendezvous-never-opened"
    codes = []
    saved = dict(os.environ)
    try:
        for r in range(plan["world_size"]):
            os.environ.clear()
            os.environ.update(rank_environment(plan, r, rendezvous, "4242", points[0]))
            codes.append(pack.main(["--list", str(listing), "--attempt", attempt]))
    finally:
        os.environ.clear()
        os.environ.update(saved)
    assert not rendezvous.exists()  # no world was opened: the answer came before
    return max(codes)


def result(p: Path) -> dict:
    return json.loads((p / "result.json").read_text())


def test_a_pack_runs_every_layout_in_one_launch_with_one_weight_load(tmp_path):
    points = [point(tmp_path, name, *overrides) for name, overrides in LAYOUTS.items()]
    assert launch(points, "job1") == EXIT_OK
    for i, p in enumerate(points):
        res = result(p)
        assert res["status"] == "completed" and res["verified"] is True, res.get("error")
        assert res["max_rel_err"] <= 1e-5
        assert res["layout"] == json.loads((p / "plan.json").read_text())["layout"]
        # one weight load for the four layouts: the first point loads, the others take it
        assert res["metrics"]["weight_cache"] == {"loads": 1, "hits": i, "models": 1}
        assert (p / "pack_attempt").read_text().strip() == "job1"
        logs = sorted(f.name for f in (p / "logs").iterdir())
        assert logs == sorted(f"4242_{r}.{s}" for r in range(2) for s in ("out", "err"))
        assert f"pack point {p.name}" in (p / "logs" / "4242_0.err").read_text()
    # a launch with nothing left: done at once (pack.main's answer on every rank; it was a launch)
    assert nothing_left(points, "job1") == EXIT_OK


def test_a_failed_point_leaves_the_others_and_the_next_launch_goes_on(tmp_path):
    """The second point raises on rank 1: the launch ends with it (its result says so); the
    next launch runs the third point and says the pack is over with a failure; a new attempt (a
    resubmission) runs only the failed point again."""
    env = {**hooks_env(), "SPORCH_TEST_FAIL_RANK": "1"}
    points = [point(tmp_path, "a", *LAYOUTS["u2"]),
              point(tmp_path, "b", *LAYOUTS["r2"], "entrypoint=launch_hooks:fail_on_rank"),
              point(tmp_path, "c", *LAYOUTS["cfg2"])]
    assert launch(points, "job1", env) == EXIT_FAILED
    assert result(points[0])["status"] == "completed" and not (points[2] / "result.json").exists()
    failed = result(points[1])
    assert failed["status"] == "failed" and failed["failed_rank"] == 1
    assert "injected failure" in failed["error"]
    # point c in a fresh launch, which then says the pack is over and b failed in this job
    assert launch(points, "job1", env) == EXIT_PACK_FAILED
    assert result(points[2])["status"] == "completed"
    assert nothing_left(points, "job1") == EXIT_PACK_FAILED  # nothing left: at once (pack.main's answer; it was a launch)
    before = {p.name: (p / "result.json").stat().st_mtime_ns for p in points}
    assert launch(points, "job2", env) == EXIT_FAILED  # a new job retries b alone
    after = {p.name: (p / "result.json").stat().st_mtime_ns for p in points}
    assert [n for n in before if before[n] != after[n]] == ["b"]


def _groups_after_points(layouts: list[dict]) -> list[int]:
    import torch
    import torch.distributed as dist

    from sporch.orchestrator.contract.plan import Layout
    from sporch.runtime.parallel import ParallelContext

    counts = [len(dist.distributed_c10d._world.pg_map)]
    for sizes in layouts:
        ctx = ParallelContext(Layout(**sizes))
        for dim in ("ulysses", "ring", "cfg", "sequence"):  # every group of the point works
            x = torch.ones(1)
            dist.all_reduce(x, group=ctx.group(dim))
            assert x.item() == len(ctx.group_ranks(dim))
        ctx.close()
        counts.append(len(dist.distributed_c10d._world.pg_map))
    return counts


def test_contexts_re_formed_per_point_leak_no_groups():
    from sporch.runtime.testing import run_distributed

    layouts = [{"ulysses": 4}, {"ring": 4}, {"ring": 2, "ulysses": 2}, {"cfg": 2, "ulysses": 2}] * 2
    for per_rank in run_distributed(_groups_after_points, 4, layouts):
        assert len(set(per_rank)) == 1, per_rank  # as many groups after every point as before the first


def _use_after_close() -> str:
    import torch

    from sporch.runtime.parallel import ContextBroken, ParallelContext

    ctx = ParallelContext.from_layout(ulysses=2)
    ctx.close()
    ctx.close()  # twice: nothing more to do
    try:
        ctx.gather_sequence(torch.ones(1, 2))
    except ContextBroken as exc:
        return str(exc)
    return "no error"


def test_a_closed_context_refuses_work():
    from sporch.runtime.testing import run_distributed

    for text in run_distributed(_use_after_close, 2):
        assert "closed: its process groups were destroyed" in text
