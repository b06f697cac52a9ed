"""Backend parameters from cluster + plan, one-line errors, atomic submission (no Slurm)."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from sporch.orchestrator.config.cluster import find_cluster
from sporch.orchestrator.config.job import load_job
from sporch.orchestrator.errors import SporchError
from sporch.orchestrator.jobs import store
from sporch.orchestrator.slurm.commands import SlurmCommandError
from sporch.orchestrator.submit import submitter
from sporch.orchestrator.submit.backend import Submitted
from sporch.orchestrator.submit.registry import get_backend
from sporch.orchestrator.submit.request import build_request
from sporch.orchestrator.submit.submitit_backend import executor_parameters, setup_lines, time_to_minutes

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"

FULL_CLUSTER = """
name: fullopts
nodes: 4
gpus_per_node: 2
gpu: {model: fake, memory_gib: 4, bf16_tflops: 0.1}
intra_node: {fabric: pcie, gb_per_s: 5}
inter_node: {fabric: ethernet, gb_per_s: 1, nics_per_node: 1}
slurm:
  partition: gpu
  account: proj1
  qos: high
  constraint: "a100&ib"
  time: "1-02:00:00"
  cpus_per_task: 3
  mem: 200G
  exclusive: true
  gpu_directive: gres
  extra: ["--reservation=resv1", "#SBATCH --hint=nomultithread", "--overcommit"]
env: {FOO: "a b"}
setup: ["module load cuda"]
"""


def _request(cluster_ref, *overrides, job_dir="/jobs/JOB"):
    cluster = find_cluster(cluster_ref)
    job = load_job(str(EXAMPLES / "tiny.yaml"), list(overrides))
    return build_request(cluster, job, job_dir=job_dir)


@pytest.mark.parametrize("text,minutes", [("10", 10), ("00:10:00", 10), ("00:10:01", 11), ("1:30", 2),
                                          ("2-00", 2880), ("1-01:30", 1530), ("1-00:00:30", 1441),
                                          ("0:0:1", 1)])
def test_time_to_minutes(text, minutes):
    assert time_to_minutes(text) == minutes


def test_time_to_minutes_rejects_garbage():
    with pytest.raises(SporchError):
        time_to_minutes("soon")


def test_slurmlab_parameters():
    req = _request("slurmlab", "resources.nodes=2")
    p = executor_parameters(req)
    assert p["nodes"] == 2 and p["tasks_per_node"] == 2 and p["gpus_per_node"] == 2
    assert p["name"] == "tiny" and p["cpus_per_task"] == 1 and p["timeout_min"] == 10
    assert p["slurm_partition"] == "lab"
    assert p["slurm_srun_args"] == ["--kill-on-bad-exit=1"]
    assert p["slurm_signal_delay_s"] == 90
    assert p["slurm_additional_parameters"] == {"requeue": True}
    for key in ("slurm_account", "slurm_qos", "slurm_constraint", "slurm_exclusive", "slurm_gres"):
        assert key not in p
    setup = "\n".join(p["slurm_setup"])
    assert "export GLOO_SOCKET_IFNAME=lo" in setup  # the Plan's env
    assert "export SPORCH_JOB_DIR=/jobs/JOB" in setup and "export SPORCH_PLAN=/jobs/JOB/plan.json" in setup
    assert "unset RANK" in setup and "mkdir -p /jobs/JOB/logs /jobs/JOB/hang" in setup
    # the flight recorder into hang/ (the lab's "fake" GPUs count as GPUs), before the cluster's env
    assert "export TORCH_FR_DUMP_TEMP_FILE=/jobs/JOB/hang/fr_trace_rank_" in setup
    assert setup.index("TORCH_FR_BUFFER_SIZE") < setup.index("GLOO_SOCKET_IFNAME")


def test_all_cluster_options_are_mapped(tmp_path):
    path = tmp_path / "fullopts.yaml"
    path.write_text(FULL_CLUSTER)
    req = _request(str(path), "resources.time=00:30:00")
    p = executor_parameters(req)
    assert p["slurm_gres"] == "gpu:2" and "gpus_per_node" not in p
    assert (p["slurm_partition"], p["slurm_account"], p["slurm_qos"], p["slurm_constraint"]) == (
        "gpu", "proj1", "high", "a100&ib")
    assert p["slurm_exclusive"] is True and p["cpus_per_task"] == 3
    assert p["timeout_min"] == 30  # the job's time wins over the cluster's
    assert p["slurm_additional_parameters"] == {"requeue": True, "mem": "200G", "reservation": "resv1",
                                                "hint": "nomultithread", "overcommit": True}
    lines = setup_lines(req)
    assert lines[0] == "module load cuda" and "export FOO='a b'" in lines


def test_gpus_per_task_directive(tmp_path):
    path = tmp_path / "pertask.yaml"
    path.write_text(FULL_CLUSTER.replace("gpu_directive: gres", "gpu_directive: gpus-per-task"))
    p = executor_parameters(_request(str(path)))
    assert p["slurm_gpus_per_task"] == 1 and "slurm_gres" not in p


@pytest.mark.skipif(shutil.which("srun") is None, reason="submitit's SlurmExecutor needs srun on PATH")
def test_submitit_accepts_the_parameters_and_writes_the_expected_script(tmp_path):
    import submitit

    req = _request("slurmlab", "resources.nodes=2", job_dir=str(tmp_path / "jd"))
    ex = submitit.AutoExecutor(folder=str(tmp_path / "jd" / "submitit"), cluster="slurm")
    ex.update_parameters(**executor_parameters(req))
    script = ex._executor._make_submission_file_text("CMD", "uuid")
    for line in ("#SBATCH --nodes=2", "#SBATCH --ntasks-per-node=2", "#SBATCH --gpus-per-node=2",
                 "#SBATCH --partition=lab", "#SBATCH --requeue", "#SBATCH --signal=USR2@90",
                 "#SBATCH --time=10", "#SBATCH --cpus-per-task=1"):
        assert line in script, line
    assert "--kill-on-bad-exit=1" in script
    assert "export SPORCH_JOB_DIR=" in script


def test_unknown_backend_is_one_line():
    with pytest.raises(SporchError, match="unknown submission backend 'pbs'"):
        get_backend("pbs")


def test_submitit_rejection_becomes_one_line_with_slurms_reason(monkeypatch, tmp_path, capsys):
    import submitit

    from sporch.orchestrator.submit import submitit_backend

    class FakeExecutor:
        def __init__(self, folder, cluster, **kw):
            pass

        def update_parameters(self, **kw):
            pass

        def submit(self, *a):
            print("sbatch: error: invalid partition specified: foo", file=sys.stderr)  # what submitit prints
            raise submitit.core.utils.FailedJobError(
                "sbatch: error: invalid partition specified: foo\n"
                "sbatch: error: Batch job submission failed: Invalid partition name specified")

    monkeypatch.setattr(submitit, "AutoExecutor", FakeExecutor)
    req = _request("slurmlab", job_dir=str(tmp_path))
    with pytest.raises(SlurmCommandError) as e:
        submitit_backend.SubmititBackend().submit(req)
    assert str(e.value) == "Slurm rejected the job (sbatch on this machine): invalid partition specified: foo"
    assert capsys.readouterr().err == ""  # submitit's own print was captured


class _Rejecting:
    name = "fake"

    def cancel(self, job_ids):
        raise AssertionError("nothing was accepted")

    def submit(self, request):
        raise SlurmCommandError("Slurm rejected the job: Node count specification invalid", tool="sbatch",
                                reason="Node count specification invalid", returncode=1)


class _Accepting:
    name = "fake"

    def __init__(self):
        self.seen = None
        self.cancelled = []

    def cancel(self, job_ids):
        self.cancelled.extend(job_ids)

    def submit(self, request):
        self.seen = request
        assert Path(request.plan_path).is_file() and Path(request.script_path).is_file()
        assert (Path(request.job_dir) / "logs").is_dir()
        return Submitted("12345", "fake", {"batch_out": "logs/{job_id}.out"})


def test_rejected_submit_leaves_nothing(monkeypatch, tmp_path, sporch_home, run_cli):
    monkeypatch.setattr("sporch.orchestrator.submit.submitter.get_backend", lambda name, *a: _Rejecting())
    out_dir = tmp_path / "runs" / "deeper"
    code, out, err = run_cli("submit", "--cluster", "slurmlab", EXAMPLES / "tiny.yaml", f"output_dir={out_dir}")
    assert code == 2
    assert err == "sporch: error: Slurm rejected the job: Node count specification invalid\n"
    assert "Traceback" not in out + err
    assert not (tmp_path / "runs").exists()  # job dir and the folders made for it are gone
    assert store.load_all() == []


def test_accepted_submit_writes_record_and_job_dir(monkeypatch, tmp_path, sporch_home, run_cli):
    fake = _Accepting()
    monkeypatch.setattr("sporch.orchestrator.submit.submitter.get_backend", lambda name, *a: fake)
    code, out, err = run_cli("submit", "--cluster", "slurmlab", EXAMPLES / "tiny.yaml", "resources.nodes=2",
                             f"output_dir={tmp_path}")
    assert code == 0, err
    [rec] = store.load_all()
    assert rec.backend_job_id == "12345" and rec.name == "tiny" and rec.world_size == 4 and rec.nodes == 2
    assert rec.id.startswith("tiny-") and f"submitted {rec.id}" in out
    jd = Path(rec.job_dir)
    assert jd.parent == tmp_path / "tiny"
    assert store.load_file(jd / "record.json") == rec
    assert rec.command == ["sporch", "submit", "--cluster", "slurmlab", str(EXAMPLES / "tiny.yaml"),
                           "resources.nodes=2", f"output_dir={tmp_path}"]
    # a second submission in the same second gets its own dir and id
    code, out, err = run_cli("submit", "--cluster", "slurmlab", EXAMPLES / "tiny.yaml", "resources.nodes=2",
                             f"output_dir={tmp_path}")
    assert code == 0
    recs = store.load_all()
    assert len({r.id for r in recs}) == 2 and len({r.job_dir for r in recs}) == 2


def test_record_failure_cancels_the_accepted_job(monkeypatch, tmp_path, sporch_home):
    backend = _Accepting()

    def boom(record, **kw):
        raise OSError("disk full")

    monkeypatch.setattr("sporch.orchestrator.jobs.store.save_new", boom)  # a new submission's record
    prepared = submitter.prepare(find_cluster("slurmlab"), load_job(str(EXAMPLES / "tiny.yaml"),
                                                                    [f"output_dir={tmp_path}"]))
    with pytest.raises(OSError):
        submitter.submit(prepared, backend=backend)
    assert backend.cancelled == ["12345"]
    assert not Path(prepared.request.job_dir).exists()


def test_remote_cluster_is_a_clear_error(tmp_path, sporch_home, run_cli):
    # an unreachable login host (nothing listens on port 1): one line, nothing written
    path = tmp_path / "remote.yaml"
    path.write_text(FULL_CLUSTER + "login: {host: 127.0.0.1, port: 1, user: me}\n")
    code, out, err = run_cli("submit", "--cluster", path, EXAMPLES / "tiny.yaml", f"output_dir={tmp_path}/runs")
    assert code == 75 and "cannot reach me@127.0.0.1:1" in err and err.count("\n") == 1  # unreachable: exit 75
    assert not (tmp_path / "runs").exists() and not sporch_home.exists()


def test_existing_nonempty_job_dir_is_refused(tmp_path, sporch_home, run_cli):
    (tmp_path / "jd").mkdir()
    (tmp_path / "jd" / "x").write_text("")
    code, out, err = run_cli("submit", "--cluster", "slurmlab", EXAMPLES / "tiny.yaml", "--job-dir", tmp_path / "jd")
    assert code == 2 and "exists and is not empty" in err


def test_dry_run_and_check_are_exclusive(run_cli):
    code, out, err = run_cli("submit", "--cluster", "slurmlab", EXAMPLES / "tiny.yaml", "--dry-run", "--check")
    assert code == 2


def test_task_module_never_imports_the_runtime():
    code = ("import sys, sporch.orchestrator.submit.task, sporch.orchestrator.submit.submitit_backend; "
            "print(any(m == 'torch' or m.startswith(('torch.', 'sporch.runtime')) for m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "False"


FAKE_PYTHON = """#!/bin/sh
# a stand-in for the job's python: records how it was started, exits with $FAKE_CODE
echo "$@" > "$FAKE_LOG"
echo "$SPORCH_JOB_DIR $SPORCH_PLAN" >> "$FAKE_LOG"
exit "$FAKE_CODE"
"""


def _fake_python(tmp_path):
    py = tmp_path / "fake-python"
    py.write_text(FAKE_PYTHON)
    py.chmod(0o755)
    return str(py)


def test_run_rank_runs_the_runtime_as_a_child_and_maps_exit_codes(monkeypatch, tmp_path):
    import os
    import signal

    from sporch.orchestrator.submit import task

    py, log, plan = _fake_python(tmp_path), tmp_path / "argv.txt", str(tmp_path / "plan.json")
    monkeypatch.setenv("FAKE_LOG", str(log))
    monkeypatch.setenv("SLURM_PROCID", "2")
    monkeypatch.setenv("FAKE_CODE", "0")
    assert task.run_rank(plan, str(tmp_path), python=py) == 0
    assert log.read_text().splitlines() == [f"-m sporch.runtime.launch --plan {plan} --output-dir {tmp_path}",
                                            f"{tmp_path} {plan}"]
    assert os.environ["SPORCH_JOB_DIR"] == str(tmp_path)
    assert signal.getsignal(signal.SIGTERM) == signal.SIG_DFL
    monkeypatch.setenv("FAKE_CODE", "1")
    with pytest.raises(task.RankFailed, match=r"^rank 2: sporch.runtime.launch exited with code 1"):
        task.run_rank(plan, str(tmp_path), python=py)
    monkeypatch.setenv("FAKE_CODE", "3")  # progress saved, requeue asked: the task leaves with 3
    with pytest.raises(SystemExit) as e:
        task.run_rank(plan, str(tmp_path), python=py)
    assert e.value.code == 3


SLOW_PYTHON = """#!/bin/sh
# saves its progress on USR2 and leaves with the requeue code, as the runtime does
trap 'echo usr2 > "$FAKE_LOG"; exit 3' USR2
echo started > "$FAKE_LOG"
while true; do sleep 0.05; done
"""

TASK_PROBE = """
import sys
from sporch.orchestrator.submit import task
try:
    task.run_rank(sys.argv[1], sys.argv[2], python=sys.argv[3])
except SystemExit as e:
    sys.exit(e.code)
"""


def test_run_rank_passes_usr2_on_to_the_runtime(tmp_path):
    """Slurm's --signal=USR2 reaches the submitit task: the runtime (the child) gets it."""
    import os
    import signal
    import time

    py = tmp_path / "slow-python"
    py.write_text(SLOW_PYTHON)
    py.chmod(0o755)
    log = tmp_path / "log.txt"
    proc = subprocess.Popen([sys.executable, "-c", TASK_PROBE, str(tmp_path / "plan.json"), str(tmp_path), str(py)],
                            env={**os.environ, "FAKE_LOG": str(log)}, start_new_session=True)
    try:
        deadline = time.monotonic() + 60
        while not (log.exists() and log.read_text().strip()) and time.monotonic() < deadline:
            time.sleep(0.05)
        proc.send_signal(signal.SIGUSR2)  # to the task only, not its process group
        assert proc.wait(timeout=60) == 3
        assert log.read_text().strip() == "usr2"
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
