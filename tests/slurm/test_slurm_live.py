"""sporch.orchestrator.slurm against the loopback lab (scripts/slurmlab/start.sh). Seconds each."""

from __future__ import annotations

import os
import subprocess
import time
from pathlib import Path

import pytest

from sporch.orchestrator.errors import SporchError
from sporch.orchestrator.slurm import commands
from sporch.orchestrator.slurm.discover import descriptor_yaml, discover_cluster
from sporch.orchestrator.slurm.query import sacct_available, sacct_states, squeue_states
from sporch.orchestrator.slurm.query import test_only as sbatch_test_only

pytestmark = pytest.mark.slurm


def test_lab_shape(slurm_cluster):
    out = commands.run_slurm(["sinfo", "--noheader", "-N", "-p", slurm_cluster.partition, "-o", "%N %c %G"]).stdout
    rows = sorted(out.split("\n")[:-1])
    assert [r.split()[0] for r in rows] == [f"node{i}" for i in range(1, slurm_cluster.nodes + 1)]
    assert all(r.split()[1] == str(slurm_cluster.cpus_per_node) for r in rows)
    assert all(r.split()[2] == f"gpu:{slurm_cluster.gpus_per_node}" for r in rows)


def test_srun_hostname_is_node_name(slurm_cluster):
    p = commands.run_slurm(["srun", "-N", str(slurm_cluster.nodes), "-t", "1", "bash", "-c",
                            'echo "$(hostname) $SLURMD_NODENAME $(getent hosts node1 | cut -d" " -f1)"'],
                           timeout=60)
    rows = sorted(p.stdout.split("\n")[:-1])
    assert [r.split()[0] for r in rows] == [f"node{i}" for i in range(1, slurm_cluster.nodes + 1)]
    assert all(r.split()[0] == r.split()[1] for r in rows)
    assert all(r.split()[2] == "127.0.0.1" for r in rows)  # MASTER_ADDR=node1 resolves


def test_sbatch_rejection_is_one_line_sporch_error(slurm_cluster):
    with pytest.raises(SporchError) as e:
        commands.sbatch(["-p", "no_such_partition", "--wrap=true"])
    assert str(e.value) == "Slurm rejected the job (sbatch on this machine): invalid partition specified: no_such_partition"


def test_sbatch_test_only(slurm_cluster):
    n, g = slurm_cluster.nodes, slurm_cluster.gpus_per_node
    ok = sbatch_test_only(args=["-p", slurm_cluster.partition, "-N", str(n), f"--gpus-per-node={g}", "-t", "10"])
    assert ok.accepted and ok.partition == slurm_cluster.partition and ok.start_time
    cases = {
        ("-p", "foo"): "invalid partition specified: foo",
        ("-N", str(n + 1)): "Node count specification invalid",
        ("-t", "03:00:00"): "Requested time limit is invalid",
        ("-N", "1", f"--gpus-per-node={g + 1}"): "Requested node configuration is not available",
        ("--constraint=nope",): "Invalid feature specification",
    }
    for args, reason in cases.items():
        res = sbatch_test_only(args=list(args))
        assert not res.accepted and res.reason.startswith(reason), (args, res)


def test_test_only_with_script(slurm_cluster, tmp_path):
    script = tmp_path / "job.sh"
    script.write_text(f"#!/bin/bash\n#SBATCH -N 2\n#SBATCH --gpus-per-node={slurm_cluster.gpus_per_node}\n"
                      "#SBATCH -t 00:05:00\nsrun true\n")
    res = sbatch_test_only(script)
    assert res.accepted and res.nodes.startswith("node")
    with pytest.raises(SporchError, match="not found"):
        sbatch_test_only(tmp_path / "missing.sh")


def test_squeue_states_one_call_and_cancel(slurm_jobs):
    a = slurm_jobs.submit("-N", "1")
    b = slurm_jobs.submit("-N", "1")
    states = squeue_states([a, b, "1"])  # "1": never existed
    assert set(states) == {a, b} and all(s.active for s in states.values())
    slurm_jobs.wait(a, lambda s: s.name == "RUNNING")
    commands.scancel([a, b])
    st = slurm_jobs.wait(a, lambda s: s.terminal)
    assert st.name == "CANCELLED"
    assert squeue_states(["1", "2"]) == {}
    commands.scancel("1")  # unknown id: not an error


def test_sacct_states_exit_codes(slurm_cluster, slurm_jobs):
    if not slurm_cluster.accounting:
        if os.environ.get("SPORCH_REQUIRE_SLURM") == "1":  # CI's lab keeps accounting: a bug there
            pytest.fail("SPORCH_REQUIRE_SLURM=1 but the lab runs without accounting", pytrace=False)
        pytest.skip("lab started without accounting")
    ok = slurm_jobs.submit(wrap="true")
    bad = slurm_jobs.submit(wrap="exit 3")
    a = slurm_jobs.wait(ok, lambda s: s.terminal, source="sacct")
    b = slurm_jobs.wait(bad, lambda s: s.terminal, source="sacct")
    assert a.completed and str(a.exit_code) == "0:0"
    assert b.name == "FAILED" and b.exit_code.returncode == 3
    c = slurm_jobs.submit()
    commands.scancel(c)
    st = slurm_jobs.wait(c, lambda s: s.terminal, source="sacct")
    assert st.name == "CANCELLED" and st.by_uid == os.getuid()
    assert sacct_states(["1"]) == {} and sacct_available()


def test_sacct_states_none_without_accounting(slurm_cluster, tmp_path, monkeypatch):
    conf = Path(os.environ["SLURM_CONF"])
    text = "".join(ln if not ln.startswith("AccountingStorage") else "" for ln in conf.read_text().splitlines(True))
    (tmp_path / "slurm.conf").write_text(text + "AccountingStorageType=accounting_storage/none\n")
    (tmp_path / "gres.conf").write_text((conf.parent / "gres.conf").read_text())
    monkeypatch.setenv("SLURM_CONF", str(tmp_path / "slurm.conf"))
    assert sacct_states(["1"]) is None
    assert not sacct_available()


def test_requeue_goes_back_to_pending(slurm_jobs):
    j = slurm_jobs.submit("-N", "1", "--requeue")
    slurm_jobs.wait(j, lambda s: s.name == "RUNNING")
    commands.requeue(j)
    st = slurm_jobs.wait(j, lambda s: s.name == "PENDING")
    assert st.reason == "BeginTime"  # eligible again after cred_expire (10 s in the lab)


def test_discover_lab(slurm_cluster, tmp_path):
    d = discover_cluster()
    assert d["nodes"] == slurm_cluster.nodes and d["gpus_per_node"] == slurm_cluster.gpus_per_node
    assert d["slurm"]["partition"] == slurm_cluster.partition
    assert d["slurm"]["time"] == slurm_cluster.max_time
    assert d["slurm"]["cpus_per_task"] == max(1, slurm_cluster.cpus_per_node // slurm_cluster.gpus_per_node)
    assert d["observed"]["node_names"] == [f"node{i}" for i in range(1, slurm_cluster.nodes + 1)]
    assert "gpu.model" in d["guessed"]  # untyped gres
    assert discover_cluster(slurm_cluster.partition)["nodes"] == slurm_cluster.nodes
    from sporch.orchestrator.config import cluster
    f = tmp_path / "lab.yaml"
    f.write_text(descriptor_yaml(d))
    spec = cluster.load_cluster_file(f)
    assert spec.world_size == slurm_cluster.nodes * slurm_cluster.gpus_per_node


def test_submitit_multinode(slurm_cluster, tmp_path):
    import submitit
    ex = submitit.AutoExecutor(folder=str(tmp_path / "%j"))
    ex.update_parameters(nodes=2, tasks_per_node=2, slurm_partition=slurm_cluster.partition, timeout_min=5,
                         cpus_per_task=1, slurm_additional_parameters={"gpus_per_node": slurm_cluster.gpus_per_node})
    job = ex.submit(subprocess.check_output, ["bash", "-c", 'echo "$(hostname) $CUDA_VISIBLE_DEVICES"'], text=True)
    try:
        deadline = time.monotonic() + 120  # a job that never leaves PENDING must not hang the suite
        while not job.done() and time.monotonic() < deadline:
            time.sleep(0.5)
        assert job.done(), f"submitit job {job.job_id} still {job.state} after 120 s"
        out = sorted(r.strip() for r in job.results())
    finally:
        job.cancel(check=False)
    hosts = [r.split()[0] for r in out]
    assert len(set(hosts)) == 2 and all(hosts.count(h) == 2 and h.startswith("node") for h in hosts), out
    assert all(r.split()[1] == ",".join(map(str, range(slurm_cluster.gpus_per_node))) for r in out), out
