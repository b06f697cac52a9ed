"""Issue 19 item 2 on the loopback Slurm lab: weights staged per node (``model.stage: node``).

4 nodes x 2 ranks: the first job copies the checkpoint once per node (4 copies, counted in the
per-node records: a node's second rank waits for its first), checksum verified. Then a copy is
corrupted on one node (a flipped byte, same size) and a second job, 4 nodes x 1 rank (the same
node-local folders: a second descriptor with one GPU per node), reuses the intact copies and
detects the corrupted one, staged again there. The lab's nodes share /tmp, so the descriptor's
``node_local_dir`` holds ``{node}``.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from .test_submit_live import ROOT, Sporch, _result

pytestmark = [pytest.mark.slurm, pytest.mark.slow]


@pytest.fixture(scope="module")
def lab(slurm_cluster, tmp_path_factory, scancel_recorded):
    root = tmp_path_factory.mktemp("stage-live")
    clusters = root / "clusters"
    clusters.mkdir()
    text = (ROOT / "clusters" / "slurmlab.yaml").read_text()
    for name, gpus in (("stagelab", 2), ("stagelab1", 1)):
        (clusters / f"{name}.yaml").write_text(
            text.replace("name: slurmlab", f"name: {name}").replace("gpus_per_node: 2", f"gpus_per_node: {gpus}")
            + f"node_local_dir: {root}/local/{{node}}\n")
    from tests.testutil import tiny_wan_folder

    ckpt = tiny_wan_folder(root / "ckpt", seed=5)  # config.json + the weights: two files
    s = Sporch(root / "home", root / "runs")
    s.env["SPORCH_CLUSTERS"] = str(clusters)
    yield s, ckpt, root
    scancel_recorded((s.home / "jobs").glob("*.json"))


def _run(sporch: Sporch, ckpt: Path, name: str, cluster: str = "stagelab", world: int = 8) -> dict:
    p = sporch("submit", "--json", "--cluster", cluster, str(ROOT / "examples" / "tiny.yaml"),
               f"output_dir={sporch.runs}", f"name={name}", f"model.weights={ckpt}", "model.stage=node",
               "workload.kind=verify", "--via", "sbatch")
    assert p.returncode == 0, p.stderr
    rec = json.loads(p.stdout)
    w = sporch("wait", rec["id"], "--interval", "1", "--timeout", "300", timeout=330)  # a bound: queue + 8 imports
    assert w.returncode == 0, w.stdout + w.stderr
    res = _result(rec)
    assert res["status"] == "completed" and res["verified"] is True and res["world_size"] == world
    return res["metrics"]["staging"]


def test_one_copy_per_node_reused_and_a_corrupted_copy_restaged(lab):
    sporch, ckpt, root = lab
    first = _run(sporch, ckpt, "stage-1")
    assert sorted(first) == ["node1", "node2", "node3", "node4"]
    # one copy per node: both files copied on each of the 4 nodes, nothing reused
    assert [(r["copied"], r["reused"]) for r in first.values()] == [(2, 0)] * 4
    copies = sorted(root.glob("local/*/ckpt-*/diffusion_pytorch_model.safetensors"))
    assert len(copies) == 4 and all(c.read_bytes() == (ckpt / "diffusion_pytorch_model.safetensors").read_bytes() for c in copies)

    bad = Path(first["node2"]["folder"]) / "diffusion_pytorch_model.safetensors"
    data = bytearray(bad.read_bytes())
    data[len(data) // 2] ^= 0x01
    bad.write_bytes(bytes(data))
    # (was two jobs: one that reused every copy, then one after the corruption) the intact
    # copies are reused on three nodes, the corrupted one staged again
    second = _run(sporch, ckpt, "stage-2", cluster="stagelab1", world=4)
    assert {n: (r["copied"], r["reused"]) for n, r in second.items()} == {
        "node1": (0, 2), "node2": (1, 1), "node3": (0, 2), "node4": (0, 2)}
    assert bad.read_bytes() == (ckpt / "diffusion_pytorch_model.safetensors").read_bytes()
