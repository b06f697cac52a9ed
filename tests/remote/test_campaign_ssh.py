"""``sporch campaign run`` over ssh: the loopback Slurm lab behind a real sshd (fixtures
``slurm_cluster`` and ``sshd``). The campaign's cluster has a ``login`` section; the CLI's own
environment has no Slurm, so every sbatch/squeue/sacct and every file of the arrays goes through
the ssh connection, and the results come back into the local campaign directory. Jobs started
over ssh get the worktree's code through ``login.setup`` (PYTHONPATH), as in test_remote_live.
"""

from __future__ import annotations

import csv
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = [pytest.mark.slurm, pytest.mark.slow]

ROOT = Path(__file__).resolve().parents[2]


def test_campaign_over_ssh_runs_on_the_login_host_and_results_come_back(slurm_cluster, sshd, tmp_path):
    lab_env = os.environ.get("SLURMLAB_ENV") or os.path.join(
        slurm_cluster.env.get("SLURMLAB_DIR", "/var/tmp/sporch-slurmlab"), "slurmlab.env")
    # counting sbatch on the login host's PATH (logs argv, execs the real one)
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "sbatch").write_text(f'#!/bin/sh\necho "$*" >> {tmp_path / "sbatch.log"}\nexec '
                                    f'{shutil.which("sbatch")} "$@"\n')
    (bin_dir / "sbatch").chmod(0o755)
    work = tmp_path / "remote-work"
    setup = [f"export PATH={bin_dir}:{os.path.dirname(sys.executable)}:$PATH", f"export PYTHONPATH={ROOT}",
             f". {lab_env}"]
    login = {"host": "127.0.0.1", "port": sshd.port, "user": sshd.user, "identity_file": sshd.key,
             "workdir": str(work), "known_hosts": str(tmp_path / "known_hosts"), "host_key_policy": "accept-new",
             "setup": setup}
    base = (ROOT / "clusters" / "slurmlab.yaml").read_text().replace("name: slurmlab", "name: sshlab")
    cluster = tmp_path / "sshlab.yaml"
    cluster.write_text(base + "login: " + json.dumps(login) + "\n")
    campaign = tmp_path / "sshcamp.yaml"
    campaign.write_text(json.dumps({
        "name": "sshcamp", "output_dir": "campaigns",  # relative: here under cwd, there under login.workdir
        "base": {"model": {"preset": "tiny"},
                 "workload": {"kind": "benchmark", "frames": 5, "height": 32, "width": 32, "guidance_scale": 1.0,
                              "dtype": "float32", "warmup": 1, "repeat": 2}},
        "matrix": {"clusters": [str(cluster)], "nodes": [1], "layouts": [{"ulysses": 2}, {"ring": 2, "ulysses": 1}]},
        "run": {"throttle": 2},
    }))
    local = tmp_path / "here"
    local.mkdir()
    env = {"PATH": "/usr/bin:/bin", "HOME": str(tmp_path), "SPORCH_HOME": str(tmp_path / "home")}

    def sporch(*args, timeout=400):
        return subprocess.run([sys.executable, "-m", "sporch.orchestrator.cli.main", *map(str, args)], cwd=local,
                              env={**env, "PYTHONPATH": str(ROOT)}, capture_output=True, text=True, timeout=timeout)

    try:
        p = sporch("campaign", "run", campaign, "--interval", "1")
        assert p.returncode == 0, p.stdout + p.stderr
        assert "2 done" in p.stderr and f"{sshd.user}@127.0.0.1:{sshd.port}" in p.stderr
        sub = (tmp_path / "sbatch.log").read_text().splitlines()
        assert len(sub) == 1  # one group: one sbatch, on the login host
        there, here = work / "campaigns" / "sshcamp", local / "campaigns" / "sshcamp"
        assert sub[0].split()[-1].startswith(str(there / "arrays"))
        state = json.loads((here / "state.json").read_text())
        assert state["arrays"][0]["root"] == str(there) and state["arrays"][0]["remote"]["port"] == sshd.port
        ids = sorted(json.loads((here / "manifest.json").read_text())["points"])
        for pid in ids:  # ran there, result copied here
            res = json.loads((here / "points" / pid / "result.json").read_text())
            assert res["status"] == "completed" and res["world_size"] == 2
            assert (there / "points" / pid / "result.json").read_text() == (here / "points" / pid / "result.json"
                                                                              ).read_text()
            assert res["provenance"]["slurm_array_job_id"] == state["arrays"][0]["job_id"]

        p = sporch("campaign", "status", here, "--json")
        assert p.returncode == 0 and json.loads(p.stdout)["counts"]["done"] == 2, p.stderr
        p = sporch("campaign", "run", campaign, "--interval", "1")  # resumed: nothing to submit
        assert p.returncode == 0 and len((tmp_path / "sbatch.log").read_text().splitlines()) == 1, p.stderr
        p = sporch("campaign", "report", here, "--out", tmp_path / "report")
        assert p.returncode == 0, p.stderr
        with open(tmp_path / "report" / "table.csv") as fh:
            assert sorted(r["id"] for r in csv.DictReader(fh)) == ids
    finally:
        state_file = local / "campaigns" / "sshcamp" / "state.json"
        if state_file.is_file():
            subprocess.run(["scancel", *[a["job_id"] for a in json.loads(state_file.read_text())["arrays"]]],
                           capture_output=True, timeout=30)
