"""sporch.orchestrator.slurm without a cluster: states, exit codes, error reasons, test-only, discovery."""

from __future__ import annotations

import os
import re
import sys

import pytest

from sporch.orchestrator.errors import SporchError
from sporch.orchestrator.slurm import commands, discover
from sporch.orchestrator.slurm.commands import job_id_list, run_slurm, slurm_reason
from sporch.orchestrator.slurm.query import parse_test_only
from sporch.orchestrator.slurm.states import ExitCode, parse_exit_code, parse_state


@pytest.mark.parametrize("text,name,terminal", [
    ("COMPLETED", "COMPLETED", True),
    ("CANCELLED by 0", "CANCELLED", True),
    ("CANCELLED+", "CANCELLED", True),
    ("FAILED", "FAILED", True),
    ("NODE_FAIL", "NODE_FAIL", True),
    ("PREEMPTED", "PREEMPTED", True),
    ("TIMEOUT", "TIMEOUT", True),
    ("OUT_OF_MEMORY", "OUT_OF_MEMORY", True),
    ("BOOT_FAIL", "BOOT_FAIL", True),
    ("REQUEUED", "REQUEUED", False),
    ("PENDING", "PENDING", False),
    ("RUNNING", "RUNNING", False),
    ("COMPLETING", "COMPLETING", False),
    ("SUSPENDED", "SUSPENDED", False),
    ("R", "RUNNING", False),
    ("PD", "PENDING", False),
    ("CG", "COMPLETING", False),
    ("CD", "COMPLETED", True),
    ("OOM", "OUT_OF_MEMORY", True),
    ("running", "RUNNING", False),
    ("  TIMEOUT \n", "TIMEOUT", True),
])
def test_parse_state(text, name, terminal):
    st = parse_state(text)
    assert st.name == name
    assert st.terminal is terminal
    assert st.active is (not terminal)


def test_cancelled_by_uid_and_raw_kept():
    st = parse_state("CANCELLED by 1000", exit_code="0:15", reason="None")
    assert (st.name, st.by_uid, st.raw, st.reason) == ("CANCELLED", 1000, "CANCELLED by 1000", None)
    assert st.exit_code == ExitCode(0, 15)
    assert st.failed and not st.completed and str(st) == "CANCELLED by 1000"


def test_unknown_state_is_active_and_flagged():
    st = parse_state("SOMETHING_NEW")
    assert st.name == "SOMETHING_NEW" and not st.known and st.active and not st.terminal
    assert parse_state("").name == "UNKNOWN"


def test_completed_needs_zero_exit():
    assert parse_state("COMPLETED", exit_code="0:0").completed
    assert not parse_state("COMPLETED", exit_code="1:0").completed
    assert parse_state("FAILED", exit_code="3:0").failed
    assert parse_state("NODE_FAIL").infra_failure and not parse_state("FAILED").infra_failure


@pytest.mark.parametrize("text,expected", [
    ("0:0", ExitCode(0, 0)), ("0:15", ExitCode(0, 15)), ("1:0", ExitCode(1, 0)), ("137", ExitCode(137, 0)),
    ("", None), (None, None), ("n/a", None),
])
def test_parse_exit_code(text, expected):
    assert parse_exit_code(text) == expected


def test_exit_code_properties():
    assert ExitCode(0, 0).ok and not ExitCode(0, 9).ok and not ExitCode(2).ok
    assert str(ExitCode(0, 15)) == "0:15"


@pytest.mark.parametrize("stderr,reason", [
    ("sbatch: error: invalid partition specified: foo\n"
     "sbatch: error: Batch job submission failed: Invalid partition name specified\n",
     "invalid partition specified: foo"),
    ("sbatch: error: Batch job submission failed: Node count specification invalid\n",
     "Node count specification invalid"),
    ("sbatch: error: Batch job submission failed: Requested time limit is invalid (missing or exceeds some limit)",
     "Requested time limit is invalid (missing or exceeds some limit)"),
    ("allocation failure: Requested node configuration is not available\n",
     "Requested node configuration is not available"),
    ("srun: error: Unable to allocate resources: Invalid feature specification\n",
     "Invalid feature specification"),
    ("slurm_load_jobs error: Invalid job id specified\n", "Invalid job id specified"),
    ("sbatch: warning: something harmless\nsbatch: error: Invalid --gpus-per-node specification\n",
     "Invalid --gpus-per-node specification"),
    ("Slurm accounting storage is disabled", "Slurm accounting storage is disabled"),
])
def test_slurm_reason(stderr, reason):
    assert slurm_reason(stderr) == reason


def test_run_slurm_rejection_message_is_one_line(tmp_path):
    fake = tmp_path / "sbatch"
    fake.write_text("#!/bin/sh\necho 'sbatch: error: invalid partition specified: foo' >&2\n"
                    "echo 'sbatch: error: Batch job submission failed: Invalid partition name specified' >&2\nexit 1\n")
    fake.chmod(0o755)
    with pytest.raises(SporchError) as e:
        run_slurm([str(fake), "-p", "foo", "--wrap", "true"])
    assert str(e.value) == "Slurm rejected the job (sbatch on this machine): invalid partition specified: foo"
    assert "\n" not in str(e.value) and e.value.exit_code == 2
    assert e.value.reason == "invalid partition specified: foo" and e.value.returncode == 1


def test_run_slurm_other_tool_failure(tmp_path):
    fake = tmp_path / "scontrol"
    fake.write_text("#!/bin/sh\necho 'scontrol: error: Invalid node name specified' >&2\nexit 1\n")
    fake.chmod(0o755)
    with pytest.raises(SporchError, match=r"^Slurm rejected the scontrol request \(scontrol on this machine\): "
                       r"Invalid node name specified$"):
        run_slurm([str(fake), "show", "node", "x"])


def test_could_not_reach_is_told_from_rejected(tmp_path):
    """Issue 9 item 17: a controller that does not answer is "could not reach" (exit 75, which
    wait/status retry), not "Slurm rejected the job"; both name the Slurm that was asked."""
    from sporch.orchestrator.errors import EXIT_UNREACHABLE, Unreachable

    fake = tmp_path / "sbatch"
    fake.write_text("#!/bin/sh\necho 'sbatch: error: Batch job submission failed: Unable to contact slurm "
                    "controller (connect failure)' >&2\nexit 1\n")
    fake.chmod(0o755)
    with pytest.raises(Unreachable) as e:
        run_slurm([str(fake), "--wrap", "true"])
    assert str(e.value) == ("could not reach Slurm (sbatch on this machine): Unable to contact slurm controller "
                            "(connect failure); is slurmctld up? (try `scontrol ping`)")
    assert e.value.exit_code == EXIT_UNREACHABLE
    res = parse_test_only(1, "", "sbatch: error: Batch job submission failed: Unable to contact slurm controller "
                                 "(connect failure)\n")
    with pytest.raises(Unreachable, match=r"^could not reach Slurm \(sbatch on this machine\)"):
        res.raise_if_rejected()


def test_run_slurm_missing_and_timeout():
    with pytest.raises(SporchError, match="not found on PATH"):
        run_slurm(["sporch-no-such-slurm-tool"])
    tool = re.escape(os.path.basename(sys.executable))  # "python", "python3" or "python3.11", as installed
    with pytest.raises(SporchError, match=rf"^could not reach Slurm \({tool} on this machine\): no answer within 0.2 s"):
        run_slurm([sys.executable, "-c", "import time; time.sleep(5)"], timeout=0.2)


def test_sbatch_parses_parsable_output():
    class Host:  # a Host whose sbatch prints a warning line before "jobid;cluster"
        where, remote = "test host", False

        def run(self, argv, **kw):
            self.argv = argv
            return 0, "sbatch: warning: x\n4242;lab\n", ""

    host = Host()
    assert commands.sbatch(["--wrap=true"], host=host) == "4242"
    assert host.argv == ["sbatch", "--parsable", "--wrap=true"]


def test_job_id_list():
    assert job_id_list(12) == ["12"]
    assert job_id_list("12,13") == ["12", "13"]
    assert job_id_list([12, "13_1", "12", "14.batch"]) == ["12", "13_1", "14.batch"]
    with pytest.raises(SporchError, match="not a Slurm job id"):
        job_id_list(["12; rm -rf /"])


def test_parse_test_only():
    ok = parse_test_only(0, "", "sbatch: Job 11390005 to start at 2026-11-22T07:10:04 using 2 processors on "
                                "nodes node[1-2] in partition lab\n")
    assert ok.accepted and ok.start_time == "2026-11-22T07:10:04" and ok.processors == 2
    assert ok.nodes == "node[1-2]" and ok.partition == "lab"
    assert ok.raise_if_rejected() is ok
    bad = parse_test_only(1, "", "allocation failure: Node count specification invalid\n")
    assert not bad.accepted and bad.reason == "Node count specification invalid"
    with pytest.raises(SporchError, match=r"^Slurm rejected the job \(sbatch on this machine\): Node count specification invalid$"):
        bad.raise_if_rejected()
    bad2 = parse_test_only(1, "", "sbatch: error: invalid partition specified: foo\n"
                                  "allocation failure: Invalid partition name specified\n")
    assert bad2.reason == "invalid partition specified: foo"


# -- discovery ---------------------------------------------------------------------------------
def test_parse_kv_line_keeps_spaces_in_values():
    kv = discover.parse_kv_line("NodeName=n1 CPUTot=64 OS=Linux 6.1.0 #1 SMP PREEMPT_DYNAMIC  RealMemory=4000 "
                                "Gres=gpu:h100:8(S:0-1) Partitions=gpu,debug")
    assert kv["OS"] == "Linux 6.1.0 #1 SMP PREEMPT_DYNAMIC" and kv["RealMemory"] == "4000"
    assert kv["Gres"] == "gpu:h100:8(S:0-1)" and kv["Partitions"] == "gpu,debug"


@pytest.mark.parametrize("gres,count,typ", [
    ("gpu:2", 2, None), ("gpu:h100:8(S:0-1)", 8, "h100"), ("gpu:a100:4(S:0-1),nvme:1", 4, "a100"),
    ("(null)", 0, None), ("", 0, None), ("gpu:nvidia_h100_80gb_hbm3:4", 4, "nvidia_h100_80gb_hbm3"),
    ("gpu:1g.10gb:2,gpu:a100:1", 3, "1g.10gb"),
])
def test_parse_gres(gres, count, typ):
    assert discover.parse_gres(gres) == {"count": count, "type": typ}


PARTITIONS = (
    "PartitionName=debug Default=NO MaxTime=00:30:00 Nodes=gpu[01-02] State=UP\n"
    "PartitionName=gpu Default=YES DefaultTime=01:00:00 MaxTime=2-00:00:00 Nodes=gpu[01-03] State=UP\n"
)
NODES = "".join(
    f"NodeName=gpu0{i} Arch=x86_64 CPUTot=96 AvailableFeatures=ib,h100 Gres=gpu:h100:8(S:0-1) "
    f"OS=Linux 5.14 #1 SMP RealMemory=1000000 Partitions={'gpu,debug' if i < 3 else 'gpu'} State=IDLE\n"
    for i in (1, 2, 3)) + "NodeName=cpu01 CPUTot=32 Gres=(null) RealMemory=1000 Partitions=cpu State=IDLE\n"
CONFIG = "Configuration data as of now\nClusterName             = big\nSLURM_VERSION           = 23.11.1\n"


class FakeScontrol:
    """A Host whose scontrol answers from the texts above."""

    where, remote = "test host", False

    def run(self, argv, **kw):
        assert argv[:2] == ["scontrol", "show"], argv
        return 0, {"partition": PARTITIONS, "node": NODES, "config": CONFIG}[argv[2]], ""


@pytest.fixture
def fake_scontrol():
    return FakeScontrol()


def test_discover_from_fake_scontrol(fake_scontrol):
    d = discover.discover_cluster(host=fake_scontrol)
    assert d["name"] == "big-gpu" and d["nodes"] == 3 and d["gpus_per_node"] == 8
    assert d["gpu"]["model"] == "H100" and "gpu.model" not in d["guessed"]
    assert "gpu.memory_gib" in d["guessed"] and "inter_node.gb_per_s" in d["guessed"]
    assert d["inter_node"]["fabric"] == "infiniband" and d["intra_node"]["fabric"] == "nvlink"
    s = d["slurm"]
    assert s["partition"] == "gpu" and s["time"] == "2-00:00:00" and s["cpus_per_task"] == 12
    assert s["gpu_directive"] == "gpus-per-node" and s["extra"] == []
    assert d["observed"]["features"] == ["ib", "h100"]
    dbg = discover.discover_cluster("debug", name="mine", host=fake_scontrol)
    assert dbg["name"] == "mine" and dbg["nodes"] == 2 and dbg["slurm"]["time"] == "00:30:00"
    with pytest.raises(SporchError, match="unknown partition 'nope'; partitions: debug, gpu"):
        discover.discover_cluster("nope", host=fake_scontrol)


def test_descriptor_yaml_marks_guesses_and_loads(fake_scontrol, tmp_path):
    d = discover.discover_cluster(host=fake_scontrol)
    text = discover.descriptor_yaml(d)
    assert "memory_gib: 80.0  # guessed" in text and "model: H100\n" in text
    assert "guessed:" not in text and "observed" not in text
    assert 'time: "2-00:00:00"' in text
    import yaml  # omegaconf's dependency

    loaded = yaml.safe_load(text)
    assert loaded == discover.spec_fields(d)
    from sporch.orchestrator.config import cluster
    f = tmp_path / "big.yaml"
    f.write_text(text)
    spec = cluster.load_cluster_file(f)
    assert spec.nodes == 3 and spec.gpus_per_node == 8 and spec.slurm.partition == "gpu"


def test_package_is_light():
    import subprocess

    code = ("import sys, sporch.orchestrator.slurm, sporch.orchestrator.slurm.query, sporch.orchestrator.slurm.discover; "
            "bad = [m for m in ('torch', 'numpy', 'yaml', 'omegaconf', 'submitit') if m in sys.modules]; "
            "assert not bad, bad")
    subprocess.run([sys.executable, "-c", code], check=True)
