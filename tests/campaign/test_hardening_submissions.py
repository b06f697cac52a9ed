"""Issue 24 items 6 and 7 on the loopback Slurm cluster: a runner stopped between sbatch
accepting an array and state.json recording it does not submit the points again, and
`campaign run` / `campaign status` ride out a Slurm that cannot be reached for a while.

Faults are injected at the client: stand-ins for sbatch / squeue / scontrol on PATH fail the
first calls as an unreachable slurmctld does, or run the real tool and then lose its answer,
or stop the runner right after the real sbatch accepted the array. Everything else is the
real lab (real arrays, real squeue).
"""

from __future__ import annotations

import json
import os
import shutil
import secrets
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from sporch.orchestrator.campaign.folder import CampaignDir
from sporch.orchestrator.campaign.intents import COMMENT_PREFIX, reconcile
from sporch.orchestrator.campaign.track import CampaignState
from sporch.orchestrator.errors import EXIT_UNREACHABLE, SporchError
from sporch.orchestrator.slurm.commands import scancel

REPO = Path(__file__).resolve().parents[2]
BASE = {"model": {"preset": "tiny"},
        "workload": {"kind": "benchmark", "frames": 5, "height": 32, "width": 32, "dtype": "float32",
                     "warmup": 1, "repeat": 1},
        "resources": {"time": "00:05:00"}}
UNREACHABLE = "slurm_load_jobs error: Unable to contact slurm controller (connect failure)"

# A stand-in for one Slurm tool: its first FAIL calls fail as an unreachable slurmctld does;
# later ones run the real tool (sbatch with --hold: the arrays stay in the queue). MODE "lose": the real sbatch runs, then its answer is lost
# (as when the client times out). MODE "term": the real sbatch runs, then the runner that
# called it is stopped with SIGTERM before it can record the job id.
STANDIN = """#!{python}
import os, signal, subprocess, sys
here = os.path.dirname(os.path.abspath(__file__))
count = os.path.join(here, "{tool}.calls")
n = int(open(count).read()) if os.path.exists(count) else 0
open(count, "w").write(str(n + 1))
if n < {fail}:
    sys.stderr.write({unreachable!r} + "\\n")
    sys.exit(1)
hold = ["--hold"] if "{tool}" == "sbatch" else []  # the arrays stay in the queue (never run)
p = subprocess.run([{real!r}, *hold, *sys.argv[1:]], capture_output=True, text=True)
if "{mode}" == "lose" and n == {fail} and p.returncode == 0:
    open(os.path.join(here, "lost_id"), "w").write(p.stdout)
    sys.stderr.write("sbatch: error: Socket timed out on send/recv operation\\n")
    sys.exit(1)
if "{mode}" == "term" and p.returncode == 0:
    open(os.path.join(here, "accepted_id"), "w").write(p.stdout)
    os.kill(os.getppid(), signal.SIGTERM)
sys.stdout.write(p.stdout)
sys.stderr.write(p.stderr)
sys.exit(p.returncode)
"""


def _standins(folder: Path, **tools) -> Path:
    """``tool=(fail, mode)`` stand-ins in ``folder``; returns the folder."""
    folder.mkdir(parents=True, exist_ok=True)
    for tool, (fail, mode) in tools.items():
        real = shutil.which(tool)
        assert real, f"{tool} not on PATH"
        (folder / tool).write_text(STANDIN.format(python=sys.executable, tool=tool, fail=fail, mode=mode,
                                                  real=real, unreachable=UNREACHABLE))
        (folder / tool).chmod(0o755)
    return folder


def _env(tmp_path: Path, bin_dir: Path = None) -> dict:
    env = {**os.environ, "PYTHONPATH": str(REPO), "SPORCH_HOME": str(tmp_path / "home"),
           "SPORCH_CLUSTERS": str(tmp_path / "clusters")}
    env.pop("SPORCH_GRACE_S", None)
    if bin_dir is not None:
        env["PATH"] = f"{bin_dir}{os.pathsep}{os.environ['PATH']}"
    return env


def _campaign(folder: Path, name: str, repeats: int = 2) -> Path:
    doc = {"name": name, "output_dir": str(folder / "campaigns"), "base": BASE,
           "matrix": {"clusters": ["slurmlab"], "nodes": [1], "layouts": [{"ulysses": 2, "ring": "auto"}],
                      "repeats": repeats},
           "run": {"throttle": 1, "pack": False}}  # array tasks are points here
    path = folder / f"{name}.yaml"
    path.write_text(json.dumps(doc))  # JSON is YAML
    return path


def _cli(cwd: Path, env: dict, *args) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "sporch.orchestrator.cli.main", *map(str, args)], cwd=cwd,
                          env=env, capture_output=True, text=True, timeout=300)


def _unique(name: str) -> str:
    """A campaign name no earlier run of the test used (their arrays may still be in the queue)."""
    return f"{name}{secrets.token_hex(3)}"


def _arrays_named(name: str) -> set:
    """Array job ids of this user's jobs whose name starts with ``name`` (one squeue)."""
    out = subprocess.run(["squeue", "--noheader", "--me", "--states=all", "--format=%F|%j"], capture_output=True,
                         text=True, timeout=30, check=True).stdout
    return {line.split("|")[0] for line in out.splitlines() if line.split("|")[-1].startswith(name)}


def _state(tmp_path: Path, name: str) -> dict:
    return json.loads((tmp_path / "campaigns" / name / "state.json").read_text())


@pytest.fixture
def cancel_after():
    """Job ids to scancel when the test ends (whatever its outcome)."""
    ids: list = []
    yield ids
    scancel([i for i in ids if i])


# -- item 6: a runner stopped after sbatch accepted the array ---------------------------------
@pytest.mark.slurm
@pytest.mark.slow
def test_a_runner_stopped_after_sbatch_does_not_submit_the_array_again(slurm_cluster, tmp_path, cancel_after):
    name = _unique("stopped")
    path = _campaign(tmp_path, name)
    bin_dir = _standins(tmp_path / "bin", sbatch=(0, "term"))
    first = _cli(tmp_path, _env(tmp_path, bin_dir), "campaign", "run", path, "--detach")
    accepted = (bin_dir / "accepted_id").read_text().strip()
    cancel_after.extend(_arrays_named(f"{name}-") | {accepted})
    assert first.returncode == -signal.SIGTERM, first.stdout + first.stderr
    state = _state(tmp_path, name)
    assert state["arrays"] == [] and len(state["intents"]) == 1  # recorded before sbatch, not after

    again = _cli(tmp_path, _env(tmp_path), "campaign", "run", path, "--detach")
    cancel_after.extend(_arrays_named(f"{name}-"))
    assert again.returncode == 0, again.stdout + again.stderr
    assert _arrays_named(f"{name}-") == {accepted}  # the same array, not a second one
    state = _state(tmp_path, name)
    assert [a["job_id"] for a in state["arrays"]] == [accepted] and state["intents"] == []
    assert {rec["task"] for rec in state["points"].values()} == {f"{accepted}_0", f"{accepted}_1"}
    assert all(rec["submissions"] == 1 for rec in state["points"].values())
    assert "0 to submit" in again.stderr + again.stdout


@pytest.mark.slurm
def test_an_intent_slurm_never_saw_is_dropped_and_one_it_knows_is_adopted(slurm_cluster, tmp_path, cancel_after):
    """reconcile on the lab: one real array carrying an intent's comment, one intent with none."""
    token = secrets.token_hex(8)
    script = tmp_path / "hold.sbatch"
    script.write_text("#!/bin/bash\n#SBATCH --array=0-1\n#SBATCH --hold\n#SBATCH --time=1\n"
                      f"#SBATCH --output={tmp_path}/%A_%a.out\ntrue\n")
    job = subprocess.run(["sbatch", "--parsable", f"--comment={COMMENT_PREFIX}{token}", str(script)],
                         capture_output=True, text=True, timeout=30, check=True).stdout.strip().split(";")[0]
    cancel_after.append(job)
    state = CampaignState(intents=[
        {"token": token, "group": "g", "cluster": "slurmlab", "n": 1, "points": ["a", "b"], "root": str(tmp_path),
         "remote": None},
        {"token": "0000000000000000", "group": "g", "cluster": "slurmlab", "n": 2, "points": ["c"],
         "root": str(tmp_path), "remote": None}])
    settled = reconcile(state)
    assert [job_id for _, job_id in settled] == [job, None]
    assert state.intents == [] and [a["job_id"] for a in state.arrays] == [job]
    assert state.points["a"]["task"] == f"{job}_0" and state.points["b"]["task"] == f"{job}_1"
    assert "c" not in state.points  # never submitted: the next run submits it
    assert state.next_submission("g") == 2


def test_state_file_intents_are_checked(tmp_path):
    cdir = CampaignDir(tmp_path)
    (tmp_path / "state.json").write_text(json.dumps({"arrays": [], "points": {}, "intents": [{"token": 1}]}))
    with pytest.raises(SporchError, match=r"'intents' must be a list of objects with token, group, root and points"):
        CampaignState.load(cdir)
    good = {"token": "t", "group": "g", "n": 3, "points": ["p"], "root": "/r", "remote": None}
    (tmp_path / "state.json").write_text(json.dumps({"arrays": [], "points": {}, "intents": [good]}))
    state = CampaignState.load(cdir)
    assert state.intents == [good] and state.next_submission("g") == 4 and state.next_submission("h") == 1


# -- item 7: outages -----------------------------------------------------------------------------
@pytest.mark.slurm
@pytest.mark.slow
def test_campaign_run_and_status_ride_out_an_outage(slurm_cluster, tmp_path, cancel_after):
    name = _unique("outage")
    path = _campaign(tmp_path, name)
    # slurmctld "restarting": the first call of each tool fails; the 2nd sbatch is accepted
    # but its answer is lost, so the retry must find it in the queue instead of submitting again.
    # (One failure a tool: each is a 1 s pause; the backoff over several failures in a row:
    # tests/jobs/test_outages.py, test_wait_and_status_retry_while_slurmctld_restarts and
    # test_retry_passes_other_errors_at_once_and_backs_off.)
    bin_dir = _standins(tmp_path / "bin", sbatch=(1, "lose"), squeue=(1, ""), scontrol=(1, ""))
    env = _env(tmp_path, bin_dir)
    run = _cli(tmp_path, env, "campaign", "run", path, "--detach", "--grace", "120")
    lost = (bin_dir / "lost_id").read_text().strip() if (bin_dir / "lost_id").exists() else ""
    cancel_after.extend(_arrays_named(f"{name}-") | {lost})
    assert run.returncode == 0, run.stdout + run.stderr
    assert "could not reach Slurm" in run.stderr and "retrying in" in run.stderr and "Traceback" not in run.stderr
    assert lost and _arrays_named(f"{name}-") == {lost}
    assert [a["job_id"] for a in _state(tmp_path, name)["arrays"]] == [lost]

    (bin_dir / "squeue.calls").write_text("0")
    status = _cli(tmp_path, env, "campaign", "status", tmp_path / "campaigns" / name, "--json", "--grace", "120")
    assert status.returncode == 0, status.stdout + status.stderr
    assert status.stderr.count("retrying in") == 1
    assert json.loads(status.stdout)["arrays"] == [lost]

    _standins(bin_dir, squeue=(10 ** 6, ""))  # down for good: status gives up after its grace
    down = _cli(tmp_path, env, "campaign", "status", tmp_path / "campaigns" / name, "--grace", "1.5")
    assert down.returncode == EXIT_UNREACHABLE, down.stdout + down.stderr
    last = down.stderr.strip().splitlines()[-1]
    assert last.startswith("sporch: error: could not reach Slurm (squeue on this machine): ")
    assert last.endswith("(gave up after retrying for 1.5 s)") and "Traceback" not in down.stderr


@pytest.mark.slurm
def test_a_campaign_run_gives_up_after_its_grace_in_one_line(slurm_cluster, tmp_path):
    name = _unique("down")
    path = _campaign(tmp_path, name)
    bin_dir = _standins(tmp_path / "bin", sbatch=(10 ** 6, ""), squeue=(10 ** 6, ""), scontrol=(10 ** 6, ""))
    p = _cli(tmp_path, _env(tmp_path, bin_dir), "campaign", "run", path, "--detach", "--grace", "1.5")
    assert p.returncode == EXIT_UNREACHABLE, p.stdout + p.stderr
    last = p.stderr.strip().splitlines()[-1]
    assert last.startswith("sporch: error: could not reach Slurm (") and "Traceback" not in p.stderr
    assert last.endswith("(gave up after retrying for 1.5 s)")
    assert _state(tmp_path, name)["arrays"] == []
