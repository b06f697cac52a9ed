"""Rank environment detection and result files (no processes, no torch.distributed)."""

import json

import pytest

from sporch.runtime.rank_env import RankEnv, RankEnvError, default_master_port, first_host
from sporch.orchestrator.contract.results import error_record, read_rank_files, rank_file, write_json_atomic


def test_slurm_environment():
    env = {"SLURM_PROCID": "5", "SLURM_LOCALID": "1", "SLURM_NODEID": "2", "SLURM_NTASKS": "8",
           "SLURM_JOB_ID": "12345", "SLURM_JOB_NODELIST": "gpu[07-10]", "SPORCH_HOSTNAME": "gpu09"}
    r = RankEnv.detect(env)
    assert (r.rank, r.local_rank, r.node_rank, r.world_size) == (5, 1, 2, 8)
    assert r.master_addr == "gpu07"
    assert r.master_port == default_master_port(12345) == 20000 + 12345 % 10000
    assert r.source == "slurm" and r.hostname == "gpu09"


def test_explicit_master_wins_and_torchrun_first():
    env = {"SLURM_PROCID": "0", "SLURM_NTASKS": "2", "SLURM_JOB_NODELIST": "n1,n2",
           "MASTER_ADDR": "10.1.1.1", "MASTER_PORT": "4242"}
    r = RankEnv.detect(env)
    assert (r.master_addr, r.master_port) == ("10.1.1.1", 4242)
    torchrun = {**env, "RANK": "1", "WORLD_SIZE": "2", "LOCAL_RANK": "1", "GROUP_RANK": "0"}
    r = RankEnv.detect(torchrun)
    assert r.source == "torchrun" and r.rank == 1 and r.world_size == 2


@pytest.mark.parametrize("nodelist, first", [
    ("node1", "node1"), ("node[3-5,7]", "node3"), ("a[01-02],b1", "a01"), ("x1,y[2-3]", "x1"),
])
def test_first_host(nodelist, first):
    assert first_host(nodelist) == first


def test_missing_environment_is_a_clear_error():
    with pytest.raises(RankEnvError, match="srun"):
        RankEnv.detect({})
    with pytest.raises(RankEnvError, match="SLURM_NTASKS"):
        RankEnv.detect({"SLURM_PROCID": "0", "SLURM_JOB_NODELIST": "n1"})


def test_atomic_json_and_rank_files(tmp_path):
    write_json_atomic(rank_file(tmp_path, 3), {"rank": 3, "status": "completed"})
    try:
        raise KeyError("boom")
    except KeyError as exc:
        write_json_atomic(rank_file(tmp_path, 1), {"rank": 1, "error": error_record(1, exc)})
    files = read_rank_files(tmp_path)
    assert sorted(files) == [1, 3]
    assert files[1]["error"]["error"] == "KeyError: 'boom'"
    assert "Traceback" in files[1]["error"]["traceback"]
    assert not list((tmp_path / "ranks").glob("*.tmp"))  # no temporary left behind
    assert json.loads(rank_file(tmp_path, 3).read_text())["status"] == "completed"
