"""Rank environment detection and result files (no processes, no torch.distributed)."""

import dataclasses
import json

import pytest

from sporch.runtime.rank_env import RankEnv, RankEnvError, default_master_port, first_host
from sporch.orchestrator.models.checkpoint_files import CheckpointError
from sporch.orchestrator.benchstats import driver_version, fingerprint
from sporch.orchestrator.contract.results import (RESULT_SCHEMA_VERSION, JobResult, RankError, RankRecord, ResultFileError, error_record,
                                                  read_rank_files, read_result, rank_file, result_file,
                                                  write_json_atomic)


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
    RankRecord(rank=3, status="completed").write(rank_file(tmp_path, 3))
    try:
        raise KeyError("boom")
    except KeyError as exc:
        RankRecord(rank=1, status="failed", error=error_record(1, exc)).write(rank_file(tmp_path, 1))
    write_json_atomic(rank_file(tmp_path, 5), {"rank": 5, "status": "completed", "surprise": 1})  # not ours
    files = read_rank_files(tmp_path)
    assert sorted(files) == [1, 3]
    assert files[1].error.error == "KeyError: 'boom'" and files[1].error.bad_input is None
    assert "Traceback" in files[1].error.traceback
    assert not list((tmp_path / "ranks").glob("*.tmp"))  # no temporary left behind
    on_disk = json.loads(rank_file(tmp_path, 3).read_text())
    assert on_disk["status"] == "completed" and on_disk["schema_version"] == RESULT_SCHEMA_VERSION == 2
    assert "error" not in on_disk and "device" not in on_disk  # optional keys stay out while unset


def test_a_checkpoint_error_is_recorded_as_bad_input():
    err = error_record(0, CheckpointError("w.safetensors lacks tensor 'x'"))
    assert err.error == "CheckpointError: w.safetensors lacks tensor 'x'"
    assert err.bad_input == "w.safetensors lacks tensor 'x'"
    result = JobResult(status="failed", errors=[err.without_traceback()], failed_rank=0, error=err.error)
    again = JobResult.from_json(result.to_json())
    assert again == result and again.cause().bad_input == "w.safetensors lacks tensor 'x'"


def test_result_round_trip_and_todays_files(tmp_path):
    # a result.json as the runtime wrote it before schema_version existed reads as version 1
    old = {"status": "completed", "layout": {"dp": 1, "cfg": 1, "ring": 2, "ulysses": 2}, "world_size": 4,
           "hosts": {"0": "n1"}, "distinct_hosts": ["n1"], "metrics": {"step_ms_median": 3.5}, "restart": 0,
           "errors": [], "failed_rank": None, "error": None, "max_abs_err": 1e-7, "verified": True}
    result = JobResult.from_dict(old)
    assert result.completed and result.max_abs_err == 1e-7 and result.cause() is None
    assert JobResult.from_dict(result.to_dict()) == result
    assert "outputs" not in result.to_dict() and result.to_dict()["failed_rank"] is None
    result.write(result_file(tmp_path))
    assert read_result(tmp_path) == result
    assert read_result(tmp_path / "nothing-here") is None
    assert result.fingerprint is None  # a version 1 file has none


def test_a_fingerprint_round_trips_and_names_what_changed(tmp_path):
    fp = fingerprint({"NCCL_IB_DISABLE": "1", "CUDA_VISIBLE_DEVICES": "0,1", "GLOO_SOCKET_IFNAME": "eth0",
                      "HOME": "/x"}, cuda="12.4", cudnn="90100", nccl="2.21.5", gpu_model="NVIDIA H100 80GB HBM3",
                     gpu_count=8, container_image="nvcr.io/nvidia/pytorch:24.05", compiled=True,
                     attention_kernel="cudnn", driver="550.54.15")
    assert fp.env == {"CUDA_VISIBLE_DEVICES": "0,1", "NCCL_IB_DISABLE": "1"} and fp.socket_ifname == "eth0"
    result = JobResult(status="completed", fingerprint=fp)
    result.write(result_file(tmp_path))
    on_disk = json.loads(result_file(tmp_path).read_text())
    assert on_disk["schema_version"] == 2 and on_disk["fingerprint"]["nccl"] == "2.21.5"
    assert read_result(tmp_path).fingerprint == fp
    newer = dataclasses.replace(fp, nccl="2.23.4", env={"CUDA_VISIBLE_DEVICES": "0,1"})
    assert fp.differences(newer) == ["NCCL 2.21.5 -> 2.23.4", "env NCCL_IB_DISABLE 1 -> unset"]
    assert fp.differences(fp) == []
    result_file(tmp_path).write_text(json.dumps({**on_disk, "fingerprint": {"nccl": 2}}))
    with pytest.raises(ResultFileError, match="fingerprint: nccl must be text"):
        read_result(tmp_path)


def test_the_driver_version_is_read_from_the_kernel_module_line(tmp_path):
    f = tmp_path / "version"
    f.write_text("NVRM version: NVIDIA UNIX x86_64 Kernel Module  550.54.15  Tue Mar  5 22:23:56 UTC 2024\n")
    assert driver_version(f) == "550.54.15"
    assert driver_version(tmp_path / "missing") is None


@pytest.mark.parametrize("text, needle", [
    ("{not json", "not valid JSON"),
    ("[1, 2]", "expected a JSON object, got list"),
    ('{"status": "completed", "colour": "red"}', "unknown key(s) colour"),
    ('{"error": "x"}', "missing key(s) status"),
    ('{"status": "completed", "schema_version": 9}', "schema_version 9 is not supported"),
    ('{"status": "completed", "fingerprint": [1]}', "fingerprint must be an object"),
    ('{"status": "failed", "errors": [{"rank": 1}]}', "errors[0]"),
])
def test_broken_result_files_are_one_line_errors(tmp_path, text, needle):
    result_file(tmp_path).write_text(text)
    with pytest.raises(ResultFileError) as e:
        read_result(tmp_path)
    assert needle in str(e.value) and "\n" not in str(e.value) and str(result_file(tmp_path)) in str(e.value)


def test_rank_error_without_a_rank_is_allowed():
    assert RankError.from_dict({"rank": None, "error": "srun: error: x"}).rank is None
