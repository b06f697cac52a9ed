"""``sporch submit/status/logs/wait/cancel`` over ssh: the loopback Slurm lab behind a real
sshd on 127.0.0.1 (fixtures ``slurm_cluster`` and ``sshd``). The CLI runs as a subprocess;
every Slurm command and file access goes through the ssh connection."""

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


class RemoteSporch:
    def __init__(self, root: Path, sshd, lab_env_file: str) -> None:
        self.root = root
        self.home = root / "home"
        self.work = root / "remote-work"
        self.kh = root / "known_hosts"
        self.where = f"{sshd.user}@127.0.0.1:{sshd.port}"  # how errors name the login host
        setup = [f"export PATH={os.path.dirname(sys.executable)}:$PATH", f"export PYTHONPATH={ROOT}",
                 f". {lab_env_file}"]
        login = (f"login:\n  host: 127.0.0.1\n  port: {sshd.port}\n  user: {sshd.user}\n"
                 f"  identity_file: {sshd.key}\n  workdir: {self.work}\n  known_hosts: {self.kh}\n"
                 f"  host_key_policy: accept-new\n  setup:\n" + "".join(f"    - {json.dumps(s)}\n" for s in setup))
        base = (ROOT / "clusters" / "slurmlab.yaml").read_text()
        self.cluster = root / "sshlab.yaml"
        self.cluster.write_text(base.replace("name: slurmlab", "name: sshlab") + login)
        self.nopart = root / "sshnopart.yaml"
        self.nopart.write_text(base.replace("name: slurmlab", "name: sshnopart").replace("partition: lab",
                                                                                          "partition: nosuch") + login)
        # the CLI's own environment has no Slurm: only the login host does
        self.env = {"PATH": "/usr/bin:/bin", "HOME": str(root), "SPORCH_HOME": str(self.home)}

    def __call__(self, *args, timeout: float = 120) -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, "-m", "sporch.orchestrator.cli.main", *map(str, args)], cwd=ROOT,
                              env=self.env, capture_output=True, text=True, timeout=timeout)

    def submit(self, *args) -> dict:
        p = self("submit", "--json", "--cluster", self.cluster, TINY, *args)
        assert p.returncode == 0, p.stderr
        return json.loads(p.stdout)

    def records(self) -> list:
        return sorted((self.home / "jobs").glob("*.json")) if (self.home / "jobs").is_dir() else []


@pytest.fixture(scope="module")
def rsporch(slurm_cluster, sshd, tmp_path_factory, scancel_recorded):
    lab_env = os.environ.get("SLURMLAB_ENV") or os.path.join(
        slurm_cluster.env.get("SLURMLAB_DIR", "/var/tmp/sporch-slurmlab"), "slurmlab.env")
    s = RemoteSporch(tmp_path_factory.mktemp("remote-live"), sshd, lab_env)
    yield s
    scancel_recorded(s.records())


def test_verify_over_ssh_completes_and_logs_come_over_sftp(rsporch, sshd):
    # one node, 2 ranks: what is over ssh is the submission, the polling and the files; the 2-node
    # job (world_size 4, 2 distinct hosts, asserted here before) is test_submit_live.py's verify
    rec = rsporch.submit("workload.kind=verify", "resources.nodes=1", "name=sshverify")
    assert rec["remote"]["host"] == "127.0.0.1" and rec["remote"]["port"] == sshd.port
    assert rec["backend"] == "sbatch" and rec["job_dir"].startswith(str(rsporch.work) + "/runs/sshverify/")
    assert rsporch.kh.read_text().startswith(f"[127.0.0.1]:{sshd.port} ")  # accept-new
    jd = Path(rec["job_dir"])
    assert (jd / "job.sbatch").is_file() and (jd / "plan.json").is_file() and (jd / "record.json").is_file()
    p = rsporch("wait", rec["id"], "--interval", "1", "--timeout", "150", timeout=180)
    assert p.returncode == 0, p.stdout + p.stderr
    assert f"{rec['id']}: COMPLETED" in p.stdout
    res = json.loads((jd / "result.json").read_text())
    assert res["status"] == "completed" and res["world_size"] == 2 and len(res["distinct_hosts"]) == 1
    assert res["verified"] is True and res["max_rel_err"] <= 1e-5
    p = rsporch("status", "--json", "--refresh", rec["id"])
    st = json.loads(p.stdout)[0]
    assert st["state"] == "COMPLETED" and st["source"] in ("squeue", "sacct"), p.stderr
    p = rsporch("logs", rec["id"], "--rank", "1")  # a quiet rank: empty logs, but they exist
    assert p.returncode == 0, p.stderr
    assert p.stdout + p.stderr == (jd / "logs" / f"{rec['backend_job_id']}_1.out").read_text() + \
        (jd / "logs" / f"{rec['backend_job_id']}_1.err").read_text()
    p = rsporch("logs", rec["id"], "-f", "--interval", "0.2", timeout=60)
    assert p.returncode == 0 and f"-- {rec['id']}: COMPLETED" in p.stderr


def test_failing_rank_over_ssh_is_named_and_its_log_read(rsporch):
    rec = rsporch.submit("entrypoint=examples.hooks:fail_on_rank", "resources.nodes=1", "name=sshfail")
    p = rsporch("wait", rec["id"], "--interval", "0.5", "--timeout", "90", timeout=120)
    assert p.returncode == 1, p.stdout + p.stderr
    assert "rank 1: RuntimeError: injected failure on rank 1" in p.stdout  # from the job dir, over SFTP
    p = rsporch("logs", rec["id"], "--rank", "1", "--stream", "err")
    assert p.returncode == 0 and "RuntimeError: injected failure on rank 1" in p.stderr, p.stderr


def test_check_over_ssh(rsporch):
    p = rsporch("submit", "--check", "--cluster", rsporch.cluster, TINY, "resources.nodes=2")
    assert p.returncode == 0, p.stderr
    assert "ok        Slurm would accept tiny" in p.stdout and "nothing submitted" in p.stdout
    p = rsporch("submit", "--check", "--cluster", rsporch.nopart, TINY)
    assert p.returncode == 2 and p.stderr.strip() == (
        f"sporch: error: Slurm rejected the job (sbatch on login host {rsporch.where}): invalid partition "
        "specified: nosuch")


def test_rejected_over_ssh_leaves_nothing(rsporch):
    before = rsporch.records()
    runs = rsporch.work / "runs" / "sshreject"
    p = rsporch("submit", "--cluster", rsporch.nopart, TINY, "name=sshreject")
    assert p.returncode == 2, p.stdout + p.stderr
    assert p.stderr.strip() == (f"sporch: error: Slurm rejected the job (sbatch on login host {rsporch.where}): "
                                "invalid partition specified: nosuch")
    assert not runs.exists()
    assert rsporch.records() == before
    p = rsporch("submit", "--via", "submitit", "--cluster", rsporch.cluster, TINY)
    assert p.returncode == 2 and len(p.stderr.strip().splitlines()) == 1 and "--via sbatch" in p.stderr


def test_cancel_over_ssh(rsporch):
    rec = rsporch.submit("entrypoint=examples.hooks:sleep", "resources.nodes=1", "name=sshcancel")
    deadline = time.monotonic() + 60
    while True:
        st = json.loads(rsporch("status", "--json", rec["id"]).stdout)[0]
        if st["state"] == "RUNNING":
            break
        assert time.monotonic() < deadline, st
        time.sleep(0.5)
    p = rsporch("cancel", rec["id"])
    assert p.returncode == 0 and "(was RUNNING)" in p.stdout, p.stderr
    p = rsporch("wait", rec["id"], "--interval", "0.5", "--timeout", "60", timeout=90)
    assert p.returncode == 3, p.stdout + p.stderr
