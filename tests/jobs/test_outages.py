"""`sporch wait`/`status` ride out a Slurm that cannot be reached for a while (issue 9 item 7).

A stand-in squeue on PATH answers "Unable to contact slurm controller" for its first N calls
(slurmctld restarting), then reports the job; the real CLI runs as a subprocess.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from sporch.orchestrator.errors import EXIT_UNREACHABLE, Unreachable
from sporch.orchestrator.jobs import store
from sporch.orchestrator.jobs.retry import retry_unreachable
from sporch.orchestrator.jobs.store import JobRecord

ROOT = Path(__file__).resolve().parents[2]

SQUEUE = """#!{python}
import os, sys
here = os.path.dirname(os.path.abspath(__file__))
count = os.path.join(here, "calls")
n = int(open(count).read()) if os.path.exists(count) else 0
open(count, "w").write(str(n + 1))
if n < {fail}:
    sys.stderr.write("slurm_load_jobs error: Unable to contact slurm controller (connect failure)\\n")
    sys.exit(1)
print("77|COMPLETED|None|0:09|node1")
"""


def _setup(tmp_path: Path, fail: int) -> dict:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "squeue").write_text(SQUEUE.format(python=sys.executable, fail=fail))
    (bin_dir / "squeue").chmod(0o755)
    home = tmp_path / "home"
    env = {**os.environ, "PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}", "SPORCH_HOME": str(home),
           "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
    jd = tmp_path / "job"
    (jd / "logs").mkdir(parents=True)
    (jd / "result.json").write_text('{"status": "completed"}')
    os.environ["SPORCH_HOME"], old = str(home), os.environ.get("SPORCH_HOME")
    try:
        store.save(JobRecord(id="out", name="out", cluster="lab", backend="sbatch", backend_job_id="77",
                             job_dir=str(jd), submitted="2026-01-01T00:00:00", world_size=1, nodes=1,
                             logs={"batch_err": "logs/{job_id}.err"}))
    finally:
        if old is None:
            os.environ.pop("SPORCH_HOME")
        else:
            os.environ["SPORCH_HOME"] = old
    return env


def _sporch(env: dict, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "sporch.orchestrator.cli.main", *args], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=120)


def test_wait_and_status_retry_while_slurmctld_restarts(tmp_path):
    env = _setup(tmp_path, fail=2)
    p = _sporch(env, "wait", "out", "--interval", "0.1", "--grace", "60")
    assert p.returncode == 0, p.stdout + p.stderr
    assert "out: COMPLETED" in p.stdout
    assert p.stderr.count("retrying in") == 2
    assert "could not reach Slurm (squeue on this machine): Unable to contact slurm controller" in p.stderr
    (tmp_path / "bin" / "calls").write_text("0")
    s = _sporch(env, "status", "--json", "--refresh", "out", "--grace", "60")
    assert s.returncode == 0, s.stderr
    assert json.loads(s.stdout)[0]["state"] == "COMPLETED"


def test_an_outage_longer_than_the_grace_exits_75_in_one_line(tmp_path):
    env = _setup(tmp_path, fail=1000)
    for args in (("wait", "out", "--grace", "1.5"), ("status", "out", "--grace", "1.5")):
        p = _sporch(env, *args)
        assert p.returncode == EXIT_UNREACHABLE, p.stdout + p.stderr
        last = p.stderr.strip().splitlines()[-1]
        assert last.startswith("sporch: error: could not reach Slurm (squeue on this machine): ")
        assert last.endswith("(gave up after retrying for 1.5 s)") and "Traceback" not in p.stderr


def test_retry_passes_other_errors_at_once_and_backs_off():
    pauses: list[float] = []
    clock = [0.0]

    def sleep(s: float) -> None:
        pauses.append(s)
        clock[0] += s

    def down():
        raise Unreachable("could not reach Slurm")

    with pytest.raises(Unreachable, match="gave up after retrying for 20 s"):
        retry_unreachable(down, grace_s=20, sleep=sleep, clock=lambda: clock[0])
    assert pauses == [1, 2, 4, 8, 5]
    with pytest.raises(ValueError):
        retry_unreachable(lambda: (_ for _ in ()).throw(ValueError("bad")), grace_s=20, sleep=sleep)
