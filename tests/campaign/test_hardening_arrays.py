"""Issue 24 item 10: a resource group larger than the cluster's MaxArraySize is submitted as
several job arrays (``slurm.max_array_size`` in the descriptor, else ``scontrol show config``)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from sporch.orchestrator.campaign.arrays import array_limit, split_for_arrays
from sporch.orchestrator.config.cluster import load_cluster_file
from sporch.orchestrator.errors import SporchError
from sporch.orchestrator.slurm.discover import DEFAULT_MAX_ARRAY_SIZE, array_size_of

REPO = Path(__file__).resolve().parents[2]
BASE = {"model": {"preset": "tiny"},
        "workload": {"kind": "benchmark", "frames": 5, "height": 32, "width": 32, "dtype": "float32",
                     "warmup": 1, "repeat": 1},
        "resources": {"time": "00:05:00"}}


def lab_descriptor(folder: Path, name: str, max_array_size) -> Path:
    text = (REPO / "clusters" / "slurmlab.yaml").read_text().replace("name: slurmlab", f"name: {name}")
    if max_array_size is not None:
        text = text.replace("  partition: lab\n", f"  partition: lab\n  max_array_size: {max_array_size}\n")
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{name}.yaml"
    path.write_text(text)
    return path


def test_split_for_arrays_keeps_order_and_bounds():
    ids = [f"p{i}" for i in range(1002)]
    parts = split_for_arrays(ids, 1001)
    assert [len(p) for p in parts] == [1001, 1] and sum(parts, []) == ids
    assert split_for_arrays(ids[:3], 2) == [["p0", "p1"], ["p2"]]
    assert split_for_arrays(ids[:2], 2) == [["p0", "p1"]]


def test_max_array_size_from_scontrol_config():
    assert array_size_of({"MaxArraySize": "40001"}) == 40001
    assert array_size_of({}) == DEFAULT_MAX_ARRAY_SIZE == 1001


def test_descriptor_max_array_size_wins_and_is_checked(tmp_path):
    c = load_cluster_file(lab_descriptor(tmp_path, "lab2", 2))
    assert c.slurm.max_array_size == 2 and array_limit(c) == 2  # no scontrol asked
    with pytest.raises(SporchError, match=r"'slurm.max_array_size' must be >= 1"):
        load_cluster_file(lab_descriptor(tmp_path, "lab0", 0))


class _NoScontrol:
    """A Host that fails the test if anything is run on it."""

    remote = False

    def run(self, *a, **k):  # pragma: no cover - the point of the test
        raise AssertionError("scontrol asked although the descriptor says")


def test_descriptor_limit_asks_no_scontrol(tmp_path):
    c = load_cluster_file(lab_descriptor(tmp_path, "lab5", 5))
    assert array_limit(c, _NoScontrol()) == 5


def _cli(cwd: Path, env: dict, *args, timeout: float = 300) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "sporch.orchestrator.cli.main", *map(str, args)], cwd=cwd, env=env,
                          capture_output=True, text=True, timeout=timeout)


def _campaign(folder: Path, name: str, cluster: str, repeats: int) -> Path:
    doc = {"name": name, "output_dir": str(folder / "campaigns"), "base": BASE,
           "matrix": {"clusters": [cluster], "nodes": [1], "layouts": [{"ulysses": 2, "ring": "auto"}],
                      "repeats": repeats},
           "run": {"throttle": 1, "pack": False}}  # array tasks are points here
    path = folder / f"{name}.yaml"
    path.write_text(json.dumps(doc))  # JSON is YAML
    return path


def _run_detached(tmp_path: Path, name: str, cluster: str, repeats: int) -> dict:
    env = {**os.environ, "PYTHONPATH": str(REPO), "SPORCH_HOME": str(tmp_path / "home"),
           "SPORCH_CLUSTERS": str(tmp_path / "clusters")}
    path = _campaign(tmp_path, name, cluster, repeats)
    state_file = tmp_path / "campaigns" / name / "state.json"
    try:
        p = _cli(tmp_path, env, "campaign", "run", path, "--detach")
        assert p.returncode == 0, p.stdout + p.stderr
        return json.loads(state_file.read_text())
    finally:
        from sporch.orchestrator.slurm.commands import scancel

        if state_file.is_file():
            scancel([a["job_id"] for a in json.loads(state_file.read_text())["arrays"]])


@pytest.mark.slurm
@pytest.mark.slow
def test_group_over_the_descriptors_limit_is_several_arrays_on_the_lab(slurm_cluster, tmp_path):
    lab_descriptor(tmp_path / "clusters", "labsmall", 2)
    state = _run_detached(tmp_path, "split3", "labsmall", 3)
    arrays = state["arrays"]
    assert [len(a["points"]) for a in arrays] == [2, 1] and len({a["group"] for a in arrays}) == 1
    assert sorted(sum((a["points"] for a in arrays), [])) == sorted(state["points"])
    first, second = arrays
    tasks = {pid: rec["task"] for pid, rec in state["points"].items()}
    assert [tasks[p] for p in second["points"]] == [f"{second['job_id']}_0"]
    script = (tmp_path / "campaigns" / "split3" / "arrays")
    texts = sorted(f.read_text() for f in script.glob("*.sbatch"))
    assert any("#SBATCH --array=0-1%1\n" in t for t in texts) and any("#SBATCH --array=0-0%1\n" in t for t in texts)
    # run.throttle holds across the slices: the second waits for the first
    assert any(f"#SBATCH --dependency=afterany:{first['job_id']}\n" in t for t in texts)


@pytest.mark.slurm
@pytest.mark.slow
def test_1002_points_are_accepted_under_the_labs_max_array_size(slurm_cluster, tmp_path):
    """No descriptor field: the lab's MaxArraySize (1001, scontrol) splits 1002 points 1001 + 1."""
    state = _run_detached(tmp_path, "big", "slurmlab", 1002)
    assert [len(a["points"]) for a in state["arrays"]] == [1001, 1]
    assert all(a["job_id"].isdigit() for a in state["arrays"])
