"""A plan's point run by the launcher's own code on ``run_distributed``'s ranks (the session's rank
pool), for the tests whose assertion is about the point -- its result.json, rank records, hang
files -- rather than about starting a launch.

Each rank takes on the environment ``sporch run --local`` gives it
(:func:`sporch.orchestrator.submit.local_run.rank_environment`: its place, node name, job folder),
reads its place with ``RankEnv.detect`` and runs ``sporch.runtime.launch.run_point`` on the world
``run_distributed`` opened: the watchdog, preflight, staging, process groups, workload, rank
records and (rank 0) result.json are the launcher's. What only a launch does -- the ``sporch``
command, the rank processes' start, the local runner's watch, local.json, logs/, the job record --
stays with the end-to-end tests (test_local_run.py and the others run it for real).
"""

from __future__ import annotations

import json
import os
from pathlib import Path

from sporch.orchestrator.config.cluster import find_cluster
from sporch.orchestrator.config.job import load_job
from sporch.orchestrator.plan.planner import make_plan
from sporch.orchestrator.submit.local_run import rank_environment
from tests.runtime.launch.local_cli import TINY

#: A process group timeout far above any collective timeout a test sets (the launcher sets it
#: above the watchdog's too: sporch.orchestrator.hangs.pg_timeout_s), so the watchdog speaks first.
TIMEOUT_S = 300.0


def plan_file(folder: Path, *overrides: str, cluster: str = "local", job: Path = TINY) -> Path:
    """``sporch plan --cluster CLUSTER JOB OVERRIDES`` written to ``folder/plan.json`` (as the
    run writes it into its run folder)."""
    plan = make_plan(find_cluster(cluster), load_job(job, list(overrides)))
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / "plan.json"
    path.write_text(plan.to_json())
    return path


def run_point_on_ranks(plan_path: Path, run_dir: Path, env: dict | None = None,
                       timeout: float = TIMEOUT_S) -> list[int]:
    """The plan's point on its world of ranks, results in ``run_dir``; each rank's exit code
    (launch's EXIT_OK, EXIT_FAILED, ...). ``env``: more variables for the ranks (hooks, faults);
    ``timeout``: the pool's wait for the ranks (a point that derives a split plan first takes longer)."""
    from sporch.runtime.testing import run_distributed  # torch: imported by the tests that run, not at collection

    plan = json.loads(Path(plan_path).read_text())
    rendezvous = run_dir / ".rendezvous-unused"  # run_distributed's ranks have joined already
    envs = [{**rank_environment(plan, r, rendezvous, "4242", run_dir), **(env or {})}
            for r in range(plan["world_size"])]
    return run_distributed(_run_point, plan["world_size"], str(plan_path), str(run_dir), envs, timeout=timeout)


def result(run_dir: Path) -> dict:
    return json.loads((run_dir / "result.json").read_text())


def _run_point(plan_path: str, run_dir: str, envs: list[dict]) -> int:
    import torch.distributed as dist

    from sporch.orchestrator.contract.plan import Plan
    from sporch.runtime.distributed import limit_cpu_threads, pick_device
    from sporch.runtime.launch import rank_place, run_point
    from sporch.runtime.rank_env import RankEnv

    rank = dist.get_rank()
    os.environ.clear()  # the rank's environment as the local runner gives it (no RANK/WORLD_SIZE)
    os.environ.update(envs[rank])
    env = RankEnv.detect()
    place = rank_place(env)
    device = pick_device(env)
    place.update(device=str(device), threads=limit_cpu_threads(device), backend=dist.get_backend())
    return run_point(Plan.load(plan_path), env, Path(run_dir), device, place)
