"""`sporch run --local`: real rank processes (gloo on CPU) running the sharded tiny DiT.

Each rank process imports torch: a few seconds of CPU each on 2 cores, so the launches here use
the fewest ranks that show the behaviour (2, on clusters/local.yaml's 2-rank twin local_cli.local2,
unless the layout needs 4). Where a test's assertion is about the point and not the launch, the
point runs through the launcher's run_point on the session's rank pool instead (on_ranks.py);
each such test says so.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from sporch.orchestrator.contract.exit_codes import EXIT_OK
from sporch.orchestrator.submit.local_run import LocalRun
from tests.runtime.launch.local_cli import HOOKS, REPO, TINY, alive, cluster_twin, hooks_env, local2, rank_pids, sporch
from tests.runtime.launch.on_ranks import plan_file, run_point_on_ranks

# (cluster, overrides): the layouts of the USP runtime issue on 4 ranks, joint attention (tiny Flux),
# cfg=2 x ulysses=2, a sequence that does not divide, and 2 emulated nodes of slurmlab.
VERIFY_CASES = {
    "u4": ("local", ["parallel.ulysses=4", "parallel.ring=1"]),
    "u2r2": ("local", ["parallel.ulysses=2", "parallel.ring=2"]),
    "r4": ("local", ["parallel.ulysses=1", "parallel.ring=4"]),
    "joint-u2r2": ("local", ["model.preset=tiny-flux", "workload.frames=1", "parallel.ulysses=2", "parallel.ring=2"]),
    "cfg2-u2": ("local", ["parallel.cfg=2", "parallel.ulysses=2", "parallel.ring=1"]),
    "uneven-seq-u2r2": ("local", ["workload.frames=5", "workload.height=48", "workload.width=80",
                                  "parallel.ulysses=2", "parallel.ring=2"]),
    "slurmlab-2-nodes": ("slurmlab", ["resources.nodes=2"]),
}
#: slurmlab-2-nodes is launched on 2 nodes x 1 rank (clusters/slurmlab.yaml with gpus_per_node 1;
#: it was 2 x 2): what it shows is the emulated nodes, 2 ranks do.
RANKS_PER_NODE_LAUNCHED = 1
#: The case `sporch run --local --verify` launches for real (its printed max_abs_err too, 2
#: emulated nodes); the other layouts' point runs on the session's rank pool through the
#: launcher's run_point (on_ranks.py), where the same result.json assertions are made (they were
#: launches before; u2r2 too, since issue 52).
LAUNCHED = ("slurmlab-2-nodes",)


def _check_verified(run_dir: Path, case: str) -> dict:
    """result.json of a verify point: sharded equals unsharded, and what the run recorded."""
    result = json.loads((run_dir / "result.json").read_text())
    assert result["status"] == "completed" and result["verified"] is True
    assert result["max_rel_err"] <= 1e-5
    assert result["metrics"]["attention_kernel"] == "cpu_flash"  # what backend="auto" ran, recorded
    plan = json.loads((run_dir / "plan.json").read_text())
    world = plan["world_size"]
    assert len(result["hosts"]) == world
    # what decides speed besides the plan (issue 35): schema 2's fingerprint
    fp = result["fingerprint"]
    assert result["schema_version"] == 2 and fp["attention_kernel"] == "cpu_flash" and fp["gpu_count"] == world
    assert fp["torch"] and fp["diffusers"] and fp["sporch"] and fp["cuda"] is None  # gloo ranks on CPU
    assert result["layout"] == plan["layout"]
    if case == "slurmlab-2-nodes":
        assert result["distinct_hosts"] == ["slurmlab-node0", "slurmlab-node1"]
    if case == "uneven-seq-u2r2":
        assert plan["sequence"]["pad"] > 0
    return result


def _run_id(proc) -> str:
    return re.search(r"id (tiny-\S+)", proc.stderr.replace("\n", " ")).group(1)


@pytest.mark.parametrize("case", LAUNCHED)
def test_verify_sharded_equals_unsharded(case, tmp_path):
    cluster, overrides = VERIFY_CASES[case]
    cluster = str(cluster_twin(tmp_path, cluster, gpus_per_node=RANKS_PER_NODE_LAUNCHED))
    run_dir, env = tmp_path / "run", {"SPORCH_HOME": str(tmp_path / "home")}
    proc = sporch("run", "--local", "--cluster", cluster, str(TINY), *overrides, "--verify",
                  "--run-dir", str(run_dir), env=env)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    m = re.search(r"^max_abs_err=(\S+)$", proc.stdout, re.M)
    assert m, proc.stdout
    assert float(m.group(1)) == _check_verified(run_dir, case)["max_abs_err"]
    # moved from test_local_faults.py's test_status_shows_outcome_progress_and_the_record_keeps_the_final_state
    # (its own verify launch): status's table shows a verify run's outcome
    table = sporch("status", _run_id(proc), env={**env, "COLUMNS": "250"}).stdout
    assert "verify ok: max_abs_err" in table, table


@pytest.mark.parametrize("case", sorted(set(VERIFY_CASES) - set(LAUNCHED)))
def test_verify_sharded_equals_unsharded_on_the_pools_ranks(case, tmp_path):
    cluster, overrides = VERIFY_CASES[case]
    run_dir = tmp_path / "run"
    codes = run_point_on_ranks(plan_file(run_dir, *overrides, "workload.kind=verify", cluster=cluster), run_dir)
    assert codes == [EXIT_OK] * 4
    _check_verified(run_dir, case)


def test_entrypoint_hook_gets_context_and_plan(tmp_path, monkeypatch):
    """On the pool's ranks (it was a launch: what a hook is given does not depend on how the ranks
    started; test_failing_rank_is_named_and_ends_the_run below still launches a hook)."""
    monkeypatch.syspath_prepend(str(HOOKS))
    run_dir = tmp_path / "run"
    plan_path = plan_file(run_dir, "entrypoint=launch_hooks:report_layout", "parallel.ulysses=2", "parallel.ring=2")
    assert run_point_on_ranks(plan_path, run_dir) == [EXIT_OK] * 4
    plan = json.loads(plan_path.read_text())
    for rank in range(4):
        metrics = json.loads((run_dir / "ranks" / f"rank{rank}.json").read_text())["metrics"]
        row = plan["ranks"][rank]
        assert metrics["entrypoint"] == "launch_hooks:report_layout"
        assert metrics["coords"] == {d: row[d] for d in ("dp", "cfg", "ring", "ulysses")}
        assert rank in metrics["ulysses_group"] and metrics["ulysses_group"] in plan["groups"]["ulysses"]
        assert metrics["ring_group"] in plan["groups"]["ring"]
        assert metrics["job_name"] == "tiny"


def test_failing_rank_is_named_and_ends_the_run(tmp_path):
    """2 ranks (it was 4, rank 2 failing): rank 1 raises, rank 0 waits in a collective."""
    run_dir = tmp_path / "run"
    env = {**hooks_env(), "SPORCH_TEST_FAIL_RANK": "1", "SPORCH_DIST_TIMEOUT_S": "60"}
    proc = sporch("run", "--local", "--cluster", str(local2(tmp_path)), str(TINY),
                  "entrypoint=launch_hooks:fail_on_rank", "--run-dir", str(run_dir), "--timeout", "120", env=env)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert "Traceback" not in proc.stderr
    rank1 = json.loads((run_dir / "ranks" / "rank1.json").read_text())
    assert rank1["status"] == "failed"
    assert rank1["error"]["error"] == "ValueError: injected failure for the test"
    result = json.loads((run_dir / "result.json").read_text())
    assert result["status"] == "failed"
    assert result["failed_rank"] == 1
    assert result["error"] == "ValueError: injected failure for the test"
    assert "injected failure" in proc.stdout


def _plan_file(tmp_path: Path, *overrides: str) -> Path:
    proc = sporch("plan", "--cluster", str(local2(tmp_path)), str(TINY), *overrides, "--json")
    assert proc.returncode == 0, proc.stderr
    path = tmp_path / "plan.json"
    path.write_text(proc.stdout)
    return path


def _latents(run_dir: Path):
    from safetensors.torch import load_file

    return load_file(str(run_dir / "latents_dp0.safetensors"))["latents"]


def test_usr2_stops_at_a_step_and_the_rerun_resumes(tmp_path):
    """USR2 -> every rank stops after the same finished step (exit 3, status requeued);
    starting again in the same folder resumes from that step and ends with exactly the
    latents of an uninterrupted run. 2 ranks, ulysses 2, 100 steps (it was 4 ranks, ulysses 2 x
    ring 2, 200 steps: the same stop/requeue/resume path, each rank with its own checkpoint shard)."""
    steps = 100  # long enough that the signal lands mid-run on a fast machine too
    overrides = ("workload.kind=inference", f"workload.steps={steps}", "parallel.ulysses=2", "parallel.ring=1")
    plan_path = _plan_file(tmp_path, *overrides)
    assert json.loads(plan_path.read_text())["world_size"] == 2

    # the uninterrupted run: the same plan on the session's rank pool (run_point, as a launch
    # runs it; it was a LocalRun launch), its latents the reference
    reference = tmp_path / "reference"
    assert run_point_on_ranks(plan_path, reference) == [EXIT_OK] * 2

    interrupted = tmp_path / "interrupted"
    run = LocalRun(plan_path, interrupted).start()
    try:
        progress = interrupted / "checkpoint" / "progress.json"
        deadline = time.monotonic() + 240
        while time.monotonic() < deadline:
            if progress.exists() and json.loads(progress.read_text())["step"] >= 2:
                break
            time.sleep(0.05)
        run.send_signal(signal.SIGUSR2)
        first = run.wait(timeout_s=240)
    finally:
        run.kill()  # never leave ranks behind, whatever failed above
    assert set(first.returncodes.values()) == {3}, first.returncodes
    assert first.result.status == "requeued"
    stopped_at = json.loads(progress.read_text())["step"]
    assert 2 <= stopped_at < steps

    second = LocalRun(plan_path, interrupted).start().wait(timeout_s=300)
    assert second.ok, second.returncodes
    metrics = second.result.metrics
    assert metrics["resumed"] is True and metrics["resumed_from_step"] == stopped_at
    assert len(metrics["step_ms"]) == steps
    assert _latents(interrupted).equal(_latents(reference))
    assert not list((interrupted / "checkpoint").glob("*.pt"))  # shards dropped once finished


def test_run_without_local_and_bad_input_are_one_line_errors(tmp_path):
    proc = sporch("run", "--cluster", "local", str(TINY))
    assert proc.returncode == 2 and "--local" in proc.stderr and "Traceback" not in proc.stderr
    proc = sporch("run", "--local", "--cluster", "local", str(TINY), "parallel.ulysses=3",
                  "--run-dir", str(tmp_path / "x"))
    assert proc.returncode == 2 and len(proc.stderr.strip().splitlines()) == 1
    assert not (tmp_path / "x").exists()  # nothing half-written


def test_status_logs_wait_and_cancel_work_on_a_local_runs_id(tmp_path):
    """A local run is a job of the local backend: it has a record, and the job commands work on
    its id from other processes (while it runs and after it ended). 2 ranks (it was 4)."""
    env = {"SPORCH_HOME": str(tmp_path / "home")}
    cluster = str(local2(tmp_path))
    done = sporch("run", "--local", "--cluster", cluster, str(TINY), "parallel.ulysses=2", "parallel.ring=1",
                  "workload.kind=benchmark", "workload.repeat=3", "--run-dir", str(tmp_path / "done"), env=env)
    assert done.returncode == 0, done.stdout + done.stderr
    rec_id = _run_id(done)
    st = sporch("status", "--json", rec_id, env=env)
    [s] = json.loads(st.stdout)
    # the run recorded its final state when it ended (source "record"); --refresh asks the backend again
    assert (s["state"], s["source"], s["result_status"], s["job_dir"]) == (
        "COMPLETED", "record", "completed", str(tmp_path / "done"))
    # moved from test_local_faults.py's test_status_shows_outcome_progress_and_the_record_keeps_the_final_state
    # (it launched its own benchmark, repeat=3): rank 0 prints a line per step (what `logs -f` shows);
    # status shows the progress as step i/N and the outcome; record.json's final is set (issue 9 item 16)
    log = (tmp_path / "done" / "logs" / "rank0.log").read_text()
    assert [m.group(1) for m in re.finditer(r"^sporch: step (\d+/\d+)", log, re.M)] == ["1/3", "2/3", "3/3"]
    assert s["progress"] == "step 3/3"
    assert re.fullmatch(r"step [\d.e+-]+ ms \(median\)", s["outcome"]), s
    record = json.loads((tmp_path / "done" / "record.json").read_text())
    assert record["final"]["state"] == "COMPLETED" and record["final"]["outcome"] == s["outcome"]
    [s] = json.loads(sporch("status", "--json", "--refresh", rec_id, env=env).stdout)
    assert (s["state"], s["source"], s["result_status"]) == ("COMPLETED", "local", "completed")
    w = sporch("wait", rec_id, env=env)
    assert w.returncode == 0 and f"{rec_id}: COMPLETED" in w.stdout
    logs = sporch("logs", rec_id, "--rank", "1", env=env)
    assert logs.returncode == 0 and logs.stdout == (tmp_path / "done" / "logs" / "rank1.log").read_text()

    # a run that sleeps: RUNNING, then cancelled through its id; wait says how it ended
    run_env = {**env, "SPORCH_SLEEP_S": "120"}
    proc = subprocess.Popen([sys.executable, "-m", "sporch.orchestrator.cli.main", "run", "--local", "--cluster", cluster,
                             str(TINY), "entrypoint=examples.hooks:sleep", "--run-dir", str(tmp_path / "long")],
                            cwd=REPO, env={**os.environ, **run_env}, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 60
        while not (tmp_path / "long" / "logs" / "rank1.log").exists() and time.monotonic() < deadline:
            time.sleep(0.2)
        [s] = json.loads(sporch("status", "--json", "tiny", env=run_env).stdout)  # the latest "tiny"
        assert s["state"] == "RUNNING" and s["job_dir"] == str(tmp_path / "long")
        ranks = rank_pids(proc.pid)
        assert len(ranks) == 2, ranks
        c = sporch("cancel", "tiny", env=run_env)
        assert c.returncode == 0 and "cancelled" in c.stdout, c.stdout + c.stderr
        w = sporch("wait", "tiny", "--timeout", "60", env=run_env)
        assert w.returncode == 3 and "CANCELLED" in w.stdout, w.stdout + w.stderr
        assert proc.wait(timeout=60) == 1
        # moved from test_local_faults.py's test_terminating_the_runner_leaves_no_rank_behind[SIGTERM]
        # (cancel sends the runner SIGTERM): no rank outlives it, and local.json says CANCELLED
        deadline = time.monotonic() + 10
        while any(alive(p) for p in ranks) and time.monotonic() < deadline:
            time.sleep(0.2)
        assert not [p for p in ranks if alive(p)], "rank processes outlived the runner"
        assert json.loads((tmp_path / "long" / "local.json").read_text())["state"] == "CANCELLED"
    finally:
        proc.kill()
