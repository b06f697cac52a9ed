"""The local emulation gives the ranks the descriptor's ``env:``, as the batch script exports it
on a Slurm cluster (issue 51, D): a ``NCCL_P2P_DISABLE`` planted in the descriptor reaches every
rank of ``sporch run --local`` (its result.json's fingerprint records it) and is warned about by
``sporch preflight --local`` (tests/cli/test_preflight.py). The run's output is also checked at
100 columns (tests/cli/test_tour_width.py checks the commands that start no ranks)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

import yaml

from sporch.orchestrator.submit.local_run import rank_environment
from tests.testutil import ROOT

TINY = ROOT / "examples" / "tiny.yaml"


def descriptor(folder: Path, **env: str) -> Path:
    doc = yaml.safe_load((ROOT / "clusters" / "local.yaml").read_text())
    doc.update(name="local2", gpus_per_node=2, env={**doc.get("env", {}), **env})
    path = folder / "local2.yaml"
    path.write_text(yaml.safe_dump(doc))
    return path


def test_rank_environment_takes_the_plans_cluster_env_before_the_emulations_own(tmp_path, monkeypatch):
    monkeypatch.setenv("NCCL_P2P_DISABLE", "0")  # the submitter's own: the descriptor's wins, as in the script
    monkeypatch.setenv("SLURM_PROCID", "7")
    plan = {"ranks": [{"node": 0, "local_rank": 0}], "nodes": 1, "world_size": 1,
            "cluster": {"name": "c", "env": {"NCCL_P2P_DISABLE": "1", "SLURM_PROCID": "5", "OMP_NUM_THREADS": "1"}}}
    env = rank_environment(plan, 0, tmp_path / "rdzv", "1", tmp_path)
    assert env["NCCL_P2P_DISABLE"] == "1" and env["SLURM_PROCID"] == "0"


def test_run_local_gives_every_rank_the_descriptors_env(tmp_path):
    with tempfile.TemporaryDirectory(prefix="sp") as short:
        run_dir = Path(short) / "run"
        env = {**os.environ, "COLUMNS": "100", "SPORCH_HOME": str(tmp_path / "home")}
        env.pop("NCCL_P2P_DISABLE", None)
        proc = subprocess.run([sys.executable, "-m", "sporch.orchestrator.cli.main", "run", "--local", "--cluster",
                               str(descriptor(tmp_path, NCCL_P2P_DISABLE="1")), str(TINY), "--verify",
                               "--run-dir", str(run_dir)], capture_output=True, text=True, timeout=300, env=env,
                              cwd=short)
        assert proc.returncode == 0, proc.stdout + proc.stderr
        result = json.loads((run_dir / "result.json").read_text())
    assert result["fingerprint"]["env"].get("NCCL_P2P_DISABLE") == "1", result["fingerprint"]
    assert result["fingerprint"]["socket_ifname"] == "lo"  # the descriptor's GLOO_SOCKET_IFNAME
    wide = [line for line in (proc.stdout + proc.stderr).splitlines() if len(line) > 100]
    assert not wide and "…" not in proc.stdout, wide
    assert "2 on 1 node" in " ".join(proc.stdout.split())  # not "1 node name(s)"


def test_run_local_json_is_the_result_for_scripts(run_cli, tmp_path, monkeypatch):
    """``run --local --json``: one JSON document on stdout (what scripts parsed ``max_abs_err=`` for),
    the run's id and folder and its result.json as written; nothing else on stdout."""
    monkeypatch.setenv("SPORCH_HOME", str(tmp_path / "home"))
    run_dir = tmp_path / "run"
    code, out, err = run_cli("run", "--local", "--cluster", "local-1gpu", TINY, "resources.nodes=1", "--verify",
                             "--json", "--run-dir", run_dir)
    assert code == 0, err
    doc = json.loads(out)
    assert doc["run_dir"] == str(run_dir) and doc["id"] and not doc["timed_out"]
    assert doc["result"] == json.loads((run_dir / "result.json").read_text())
    assert doc["result"]["status"] == "completed" and doc["result"]["max_abs_err"] <= doc["result"]["tolerance"]
    assert "max_abs_err=" not in out
