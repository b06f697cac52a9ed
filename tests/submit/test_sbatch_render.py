from __future__ import annotations

import pytest

from sporch.orchestrator.config.cluster import find_cluster, load_cluster_file
from sporch.orchestrator.config.job import load_job
from sporch.orchestrator.errors import SporchError
from sporch.orchestrator.plan.planner import make_plan
from sporch.orchestrator.submit.render import render_sbatch
from tests.testutil import EXAMPLES, GOLDEN_JOB_DIR, golden_dir, update_golden, write
GOLDEN = golden_dir(__file__)

CASES = {
    "a100x32_wan14b": ("a100x32", "wan14b-720p.yaml", []),
    "l40x16_wan1.3b": ("l40x16", "wan1.3b-480p.yaml", ["parallel.ring=2", "parallel.ulysses=4"]),
    "h100x64_wan14b_cfg2": ("h100x64", "wan14b-720p.yaml", ["parallel.cfg=2", "parallel.ring=4"]),
}


def render(cluster, job, overrides=(), job_dir=GOLDEN_JOB_DIR):
    c = cluster if not isinstance(cluster, str) else find_cluster(cluster)
    return render_sbatch(make_plan(c, load_job(EXAMPLES / job, list(overrides))), job_dir)


@pytest.mark.parametrize("case", sorted(CASES))
def test_golden(case):
    cluster, job, overrides = CASES[case]
    text = render(cluster, job, overrides)
    path = GOLDEN / f"{case}.sbatch"
    if update_golden():
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
        pytest.skip(f"golden {path.name} regenerated; review the diff, then run again without SPORCH_UPDATE_GOLDEN")
    assert path.exists(), f"missing golden {path.name}; run with SPORCH_UPDATE_GOLDEN=1 to create it"
    assert text == path.read_text(), f"golden {path.name} differs; SPORCH_UPDATE_GOLDEN=1 regenerates it"


def test_script_essentials():
    text = render("a100x32", "wan14b-720p.yaml")
    lines = text.splitlines()
    assert lines[0] == "#!/bin/bash"
    for needle in (
        "#SBATCH --nodes=4", "#SBATCH --ntasks-per-node=8", "#SBATCH --gpus-per-node=8",
        "#SBATCH --cpus-per-task=12", "#SBATCH --time=01:00:00", "#SBATCH --partition=gpu",
        "#SBATCH --account=dit", "#SBATCH --exclusive", "#SBATCH --signal=USR2@90", "#SBATCH --requeue",
        f"#SBATCH --output={GOLDEN_JOB_DIR}/logs/%j.out", f"#SBATCH --error={GOLDEN_JOB_DIR}/logs/%j.err",
        'export MASTER_ADDR=$(scontrol show hostnames "$SLURM_JOB_NODELIST" | head -n 1)',
        "export MASTER_PORT=$((20000 + SLURM_JOB_ID % 10000))",
        "export NCCL_IB_HCA=mlx5_0,mlx5_1,mlx5_2,mlx5_3", "export NCCL_IB_DISABLE=0",
        "module load cuda/12.4 nccl",
    ):
        assert needle in lines, needle
    assert "#SBATCH --qos" not in text and "#SBATCH --constraint" not in text
    srun = text[text.index("srun "):]
    assert srun.startswith("srun --kill-on-bad-exit=1")
    assert 'python -m sporch.runtime.launch --plan "$SPORCH_JOB_DIR/plan.json"' in srun
    assert f"export SPORCH_JOB_DIR={GOLDEN_JOB_DIR}" in lines  # the job dir, spelled once
    # setup lines come before srun, env before srun
    assert text.index("module load") < text.index("srun ") and text.index("MASTER_ADDR") < text.index("srun ")


def test_gpu_directive_styles_and_options(tmp_path):
    assert "#SBATCH --gres=gpu:8" in render("h100x64", "wan14b-720p.yaml").splitlines()
    l40 = render("l40x16", "wan1.3b-480p.yaml", ["parallel.ring=2", "parallel.ulysses=4"])
    assert "#SBATCH --gpus-per-task=1" in l40 and "#SBATCH --exclusive" not in l40
    assert "export NCCL_IB_DISABLE=1" in l40 and "#SBATCH --mem=480G" in l40
    h100 = render("h100x64", "wan14b-720p.yaml")
    assert "#SBATCH --qos=high" in h100 and "#SBATCH --constraint=h100" in h100 and "#SBATCH --switches=1" in h100
    c = write(tmp_path, "c.yaml", "nodes: 1\ngpus_per_node: 4\npython: /opt/venv/bin/python\n"
                                  "slurm: {time: '3:00:00', extra: ['#SBATCH --reservation=r1']}\n")
    text = render(load_cluster_file(c), "tiny.yaml", ["resources.time=null"])
    assert "/opt/venv/bin/python -m sporch.runtime.launch" in text
    assert "#SBATCH --time=3:00:00" in text and "#SBATCH --reservation=r1" in text
    bad = write(tmp_path, "bad.yaml", "nodes: 1\ngpus_per_node: 4\nslurm: {extra: ['reservation=r1']}\n")
    with pytest.raises(SporchError, match="not an sbatch option"):
        render(load_cluster_file(bad), "tiny.yaml")
    with pytest.raises(SporchError, match="without whitespace"):
        render("local", "tiny.yaml", job_dir="/a b")


def test_slurmlab_script():
    text = render("slurmlab", "tiny.yaml", ["parallel.ulysses=2", "parallel.ring=4"])
    assert "#SBATCH --nodes=4" in text and "#SBATCH --ntasks-per-node=2" in text
    assert "#SBATCH --gpus-per-node=2" in text and "#SBATCH --partition=lab" in text
    assert "#SBATCH --cpus-per-task=1" in text


def test_hang_env_on_gpu_clusters_only_and_the_cluster_env_wins(tmp_path):
    """Issue 19 item 4: the flight recorder's variables point into the job folder's hang/, before
    the cluster's own env (exported later, so it wins); a CPU cluster gets none of them."""
    text = render("a100x32", "wan14b-720p.yaml", ["resources.collective_timeout=100"])
    assert 'export TORCH_FR_DUMP_TEMP_FILE="$SPORCH_JOB_DIR/hang/fr_trace_rank_"' in text.splitlines()
    assert "export TORCH_NCCL_HEARTBEAT_TIMEOUT_SEC=160" in text  # the process group's timeout
    assert text.index("TORCH_FR_BUFFER_SIZE") < text.index("# Fabric") and '"$SPORCH_JOB_DIR/hang"' in text
    cpu = render("local", "tiny.yaml")
    assert "TORCH_FR" not in cpu and "TORCH_NCCL_DUMP" not in cpu and "/hang" not in cpu
    text = (EXAMPLES.parent / "clusters" / "a100x32.yaml").read_text()
    own = write(tmp_path, "own.yaml", text.replace("env:", "env:\n  TORCH_FR_BUFFER_SIZE: \"0\"", 1))
    lines = render(load_cluster_file(own), "wan14b-720p.yaml").splitlines()
    assert lines.index("export TORCH_FR_BUFFER_SIZE=0") > lines.index("export TORCH_FR_BUFFER_SIZE=2000")
