"""``sporch submit/status/logs/cancel/wait`` and ``clusters discover`` on the loopback Slurm lab.

Every job is cancelled at teardown. The CLI runs as a subprocess (real exit codes, the
environment a user has); jobs inherit it, with the repository on PYTHONPATH for
``examples.hooks``. About 1.5-2 minutes on the 2-core dev machine.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

pytestmark = [pytest.mark.slurm, pytest.mark.slow]

ROOT = Path(__file__).resolve().parents[2]
TINY = str(ROOT / "examples" / "tiny.yaml")


class Sporch:
    def __init__(self, home: Path, runs: Path) -> None:
        self.home = home
        self.runs = runs
        self.env = dict(os.environ)
        self.env.update(SPORCH_HOME=str(home), PYTHONPATH=os.pathsep.join(
            [str(ROOT)] + [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]))
        self.env.pop("SPORCH_DEBUG", None)
        self.env["COLUMNS"] = "300"  # status tables: wide enough that no cell is cut short

    def __call__(self, *args, timeout: float = 120, env=None) -> subprocess.CompletedProcess:
        e = dict(self.env)
        e.update(env or {})
        return subprocess.run([sys.executable, "-m", "sporch.orchestrator.cli.main", *map(str, args)], cwd=ROOT, env=e,
                              capture_output=True, text=True, timeout=timeout)

    def submit(self, *args, env=None) -> dict:
        p = self("submit", "--json", "--cluster", "slurmlab", TINY, f"output_dir={self.runs}", *args, env=env)
        assert p.returncode == 0, p.stderr
        return json.loads(p.stdout)

    def status(self, job: str) -> dict:
        p = self("status", "--json", job)
        assert p.returncode == 0, p.stderr
        return json.loads(p.stdout)[0]

    def wait_until(self, job: str, cond, timeout: float = 60) -> dict:
        deadline = time.monotonic() + timeout
        while True:
            st = self.status(job)
            if cond(st):
                return st
            assert time.monotonic() < deadline, f"{job}: {st['state']} after {timeout} s"
            time.sleep(0.5)


@pytest.fixture(scope="module")
def sporch(slurm_cluster, tmp_path_factory, scancel_recorded):
    root = tmp_path_factory.mktemp("submit-live")
    s = Sporch(root / "home", root / "runs")
    yield s
    scancel_recorded((s.home / "jobs").glob("*.json"))


def _result(rec: dict) -> dict:
    return json.loads((Path(rec["job_dir"]) / "result.json").read_text())


def test_verify_reaches_completed_with_both_backends(sporch):
    # submitit's job on one node (2 ranks): its 2-node launch is test_hang_live.py's (rank 3 on
    # another node than rank 0) and test_container_live.py's
    nodes = {"submitit": 1, "sbatch": 2}
    recs = [sporch.submit("workload.kind=verify", f"resources.nodes={n}", f"name=verify-{via}", "--via", via)
            for via, n in nodes.items()]
    for rec, n in zip(recs, nodes.values()):
        p = sporch("wait", rec["id"], "--interval", "1", "--timeout", "150", timeout=180)
        assert p.returncode == 0, p.stdout + p.stderr
        assert f"{rec['id']}: COMPLETED" in p.stdout
        res = _result(rec)
        assert res["status"] == "completed" and res["world_size"] == 2 * n
        assert len(res["hosts"]) == 2 * n and len(res["distinct_hosts"]) == n
        assert set(res["distinct_hosts"]) <= {"node1", "node2", "node3", "node4"}
        m = res["metrics"]
        # the bound (float32 sharded vs unsharded <= 1e-5 relative), not the runtime's own
        assert res["verified"] is True and res["max_rel_err"] <= 1e-5 and m["ok"]
        st = sporch.status(rec["id"])
        assert st["state"] == "COMPLETED" and st["failed_rank"] is None
        # logs: rank 0's output exists and -f returns once the job has ended
        p = sporch("logs", rec["id"], "--rank", "0")
        assert p.returncode == 0, p.stderr
        p = sporch("logs", rec["id"], "-f", "--interval", "0.2", timeout=30)
        assert p.returncode == 0 and "COMPLETED" in p.stderr
    sbatch_rec = recs[1]
    assert (Path(sbatch_rec["job_dir"]) / "job.sbatch").read_text().startswith("#!/bin/bash")
    assert (Path(sbatch_rec["job_dir"]) / "logs" / f"{sbatch_rec['backend_job_id']}_3.out").exists()


def test_cancel_running_job(sporch):
    rec = sporch.submit("entrypoint=examples.hooks:sleep", "resources.nodes=1", "name=tocancel",
                        env={"SPORCH_SLEEP_S": "300"})
    sporch.wait_until(rec["id"], lambda s: s["state"] == "RUNNING", timeout=30)
    p = sporch("cancel", rec["id"])
    assert p.returncode == 0 and "(was RUNNING)" in p.stdout, p.stderr
    p = sporch("wait", rec["id"], "--interval", "0.5", "--timeout", "60")
    assert p.returncode == 3, p.stdout + p.stderr
    assert sporch.status(rec["id"])["state"] == "CANCELLED"
    p = sporch("cancel", rec["id"])
    assert p.returncode == 0 and "already CANCELLED" in p.stdout


def test_failing_rank_ends_the_job_quickly_and_is_named(sporch):
    rec = sporch.submit("entrypoint=examples.hooks:fail_on_rank", "resources.nodes=2", "name=failing",
                        env={"SPORCH_FAIL_RANK": "2", "SPORCH_HANG_S": "300"})
    # The other ranks would hang for 300 s: the job ending before that (wait's 240 s bound, else
    # exit 124) is kill-on-bad-exit at work. The "FAILED ... within 60 s" is not timed
    # here: on a loaded machine scheduling and 4 torch imports alone can take that long; the
    # bound only has to tell seconds from the 300 s hang.
    p = sporch("wait", rec["id"], "--interval", "0.5", "--timeout", "240", timeout=270)
    assert p.returncode == 1, p.stdout + p.stderr
    st = sporch.status(rec["id"])
    assert st["state"] == "FAILED"
    assert st["failed_rank"] == 2
    assert "injected failure on rank 2" in st["error"]
    p = sporch("status", rec["id"])
    assert "injected failure on rank 2" in p.stdout


def test_a_rank_killed_by_a_signal_is_blamed_not_its_peers(sporch):
    """Issue 9 item 4: rank 2 is killed by SIGKILL (no record); its peers' records say their
    connection broke. srun's report in the batch log makes rank 2 the root cause."""
    rec = sporch.submit("entrypoint=examples.hooks:die_on_rank", "resources.nodes=2", "name=die", "--via", "sbatch",
                        env={"SPORCH_DIE_RANK": "2", "SPORCH_DIST_TIMEOUT_S": "60"})
    p = sporch("wait", rec["id"], "--interval", "1", "--timeout", "150", timeout=180)
    assert p.returncode == 1, p.stdout + p.stderr
    st = sporch.status(rec["id"])
    assert st["failed_rank"] == 2, st
    assert st["error"].startswith("rank 2 died: killed by signal 9 (SIGKILL) on node"), st


def _progress_step(rec: dict) -> int:
    try:
        return json.loads((Path(rec["job_dir"]) / "checkpoint" / "progress.json").read_text()).get("step", 0)
    except (OSError, ValueError):
        return 0


def _wait_for_step(rec: dict, at_least: int, timeout: float = 180, seen: list | None = None) -> int:
    """Poll the job's progress checkpoint until it names step ``at_least``; every step read is
    appended to ``seen``."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        step = _progress_step(rec)
        if seen is not None:
            seen.append(step)
        if step >= at_least:
            return step
        time.sleep(0.2)
    raise AssertionError(f"{rec['id']}: no progress checkpoint with step >= {at_least} within {timeout} s")


def _slurm_job(job_id: str) -> dict:
    p = subprocess.run(["scontrol", "show", "job", "-o", job_id], capture_output=True, text=True, timeout=30)
    return dict(w.split("=", 1) for w in p.stdout.split() if "=" in w)


def test_requeued_and_preempted_benchmark_resumes(sporch):
    """One job stopped twice: ``scontrol requeue`` (SIGTERM, then requeue), then, once it runs
    again, USR2 (the runtime saves progress and requeues itself); it finishes, each time resumed
    from its last finished step. (Was two jobs of 2 nodes, one per way of stopping; the 2-node
    launch is test_verify_reaches_completed_with_both_backends'.)"""
    # steps long enough that a stop lands before the last one (each of 768 tokens, 200 of them), the
    # job one node of 2 ranks: was 250 steps of 1728 tokens on 2 nodes, twice
    bench = ("workload.kind=benchmark", "workload.warmup=1", "workload.repeat=200", "workload.height=256",
             "workload.width=256", "resources.nodes=1")
    rec = sporch.submit(*bench, "name=requeued")
    _wait_for_step(rec, 3)
    subprocess.run(["scontrol", "requeue", rec["backend_job_id"]], check=True, capture_output=True, timeout=30)
    deadline = time.monotonic() + 180  # bounds, not timings: the queue and torch imports, loaded
    while True:  # running again, as its second instance
        job = _slurm_job(rec["backend_job_id"])
        if int(job.get("Restarts", 0)) >= 1 and job.get("JobState") == "RUNNING":
            break
        assert time.monotonic() < deadline, job
        time.sleep(0.5)
    stopped = _progress_step(rec)  # where scontrol requeue stopped it
    assert stopped >= 3
    seen: list = []
    resumed = _wait_for_step(rec, stopped + 2, seen=seen)
    # resumed, not started again: the checkpoint never goes back below where it stopped
    assert min(seen) >= stopped, (stopped, seen)
    subprocess.run(["scancel", "--signal=USR2", rec["backend_job_id"]], check=True, capture_output=True, timeout=30)
    # a bound, not a timing: its third start and the rest of its steps, on a loaded machine
    p = sporch("wait", rec["id"], "--interval", "1", "--timeout", "300", timeout=330)
    assert p.returncode == 0, p.stdout + p.stderr
    res = _result(rec)
    assert res["status"] == "completed"
    assert res["restart"] >= 2, rec["id"]  # requeued by scontrol, then by the runtime on USR2
    assert res["metrics"]["resumed_from_step"] >= resumed, rec["id"]  # the last instance: after the USR2 stop
    assert res["metrics"]["steps_timed"] == 200


@pytest.fixture(scope="module")
def bad_clusters(tmp_path_factory):
    folder = tmp_path_factory.mktemp("bad-clusters")
    text = (ROOT / "clusters" / "slurmlab.yaml").read_text()
    (folder / "nopart.yaml").write_text(text.replace("partition: lab", "partition: nosuch")
                                        .replace("name: slurmlab", "name: nopart"))
    (folder / "toobig.yaml").write_text(text.replace("nodes: 4", "nodes: 5").replace("name: slurmlab", "name: toobig"))
    return folder


REJECTIONS = [
    ("nopart.yaml", [], "invalid partition specified: nosuch"),
    ("toobig.yaml", [], "More processors requested than permitted"),
    (None, ["resources.time=03:00:00"], "Requested time limit is invalid"),
]


@pytest.mark.parametrize("via", ["submitit", "sbatch"])
@pytest.mark.parametrize("cluster,overrides,reason", REJECTIONS)
def test_rejected_requests_are_one_line_and_leave_nothing(sporch, bad_clusters, via, cluster, overrides, reason,
                                                          tmp_path):
    cl = str(bad_clusters / cluster) if cluster else "slurmlab"
    runs = tmp_path / "runs"
    before = sorted((sporch.home / "jobs").glob("*.json")) if (sporch.home / "jobs").exists() else []
    p = sporch("submit", "--via", via, "--cluster", cl, TINY, f"output_dir={runs}", *overrides)
    assert p.returncode == 2
    assert p.stderr.startswith("sporch: error: Slurm rejected the job (sbatch on this machine): ") and reason in p.stderr
    assert p.stderr.count("\n") == 1 and "Traceback" not in p.stderr
    assert not runs.exists()
    after = sorted((sporch.home / "jobs").glob("*.json")) if (sporch.home / "jobs").exists() else []
    assert after == before
    # --check says the same without submitting
    p = sporch("submit", "--check", "--cluster", cl, TINY, *overrides)
    assert p.returncode == 2 and reason in p.stderr and p.stderr.count("\n") == 1


def test_check_accepts_a_good_request(sporch):
    p = sporch("submit", "--check", "--cluster", "slurmlab", TINY, "resources.nodes=2")
    assert p.returncode == 0, p.stderr
    assert "Slurm would accept tiny" in p.stdout and "node[" in p.stdout and "nothing submitted" in p.stdout


def test_clusters_discover_writes_a_loadable_descriptor(sporch, slurm_cluster, tmp_path):
    from sporch.orchestrator.config.cluster import load_cluster_file

    out = tmp_path / "lab.yaml"
    p = sporch("clusters", "discover", "--partition", slurm_cluster.partition, "-o", out)
    assert p.returncode == 0, p.stderr
    assert "guessed" in p.stdout
    text = out.read_text()
    assert "# guessed" in text and "inter_node" in text
    c = load_cluster_file(out)
    assert (c.nodes, c.gpus_per_node, c.slurm.partition) == (slurm_cluster.nodes, slurm_cluster.gpus_per_node,
                                                              slurm_cluster.partition)
    assert c.slurm.cpus_per_task == slurm_cluster.cpus_per_node // slurm_cluster.gpus_per_node
    p = sporch("clusters", "discover", "-o", out)
    assert p.returncode == 2 and "--force" in p.stderr
    p = sporch("clusters", "discover", "--partition", "nosuch")
    assert p.returncode == 2 and "unknown partition 'nosuch'" in p.stderr
