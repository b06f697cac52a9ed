"""Issue 19 item 2: weights staged per node (``model.stage: node``, runtime/stage.py): one
verified copy per node, reused while it checks out, re-staged when corrupted; on a local run
the ranks load the node's copy and result.json has the record. The loopback-Slurm test with 4
nodes is tests/submit/test_stage_live.py."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from sporch.orchestrator.config.cluster import find_cluster
from sporch.orchestrator.config.job import job_from_dict
from sporch.orchestrator.errors import SporchError
from sporch.orchestrator.plan.planner import make_plan
from sporch.runtime.stage import MANIFEST, stage, stage_for_node, staged_folder

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture()
def checkpoint(tmp_path):
    src = tmp_path / "ckpt"
    (src / "transformer").mkdir(parents=True)
    (src / "model_index.json").write_text('{"a": 1}')
    (src / "transformer" / "part-1.safetensors").write_bytes(os.urandom(300_000))
    (src / "transformer" / "part-2.safetensors").write_bytes(os.urandom(200_000))
    return src


def _same_tree(a: Path, b: Path) -> bool:
    files = sorted(p.relative_to(a) for p in a.rglob("*") if p.is_file())
    return files == sorted(p.relative_to(b) for p in b.rglob("*") if p.is_file() and p.name != MANIFEST) and all(
        (a / f).read_bytes() == (b / f).read_bytes() for f in files)


def test_one_verified_copy_then_reused_then_a_corrupted_file_is_staged_again(checkpoint, tmp_path):
    dest = staged_folder(str(checkpoint), str(tmp_path / "local" / "{node}"), "node7")
    assert dest.parent == tmp_path / "local" / "node7" and dest.name.startswith("ckpt-")
    first = stage(str(checkpoint), dest)
    assert (first["files"], first["copied"], first["reused"], first["bytes_copied"]) == (3, 3, 0, 500_008)
    assert _same_tree(checkpoint, dest)
    again = stage(str(checkpoint), dest)
    assert (again["copied"], again["reused"], again["bytes_copied"]) == (0, 3, 0)
    # a flipped byte, same size: the hash gives it away, and only that file is copied again
    part = dest / "transformer" / "part-2.safetensors"
    data = bytearray(part.read_bytes())
    data[1000] ^= 0xFF
    part.write_bytes(bytes(data))
    fixed = stage(str(checkpoint), dest)
    assert (fixed["copied"], fixed["reused"], fixed["bytes_copied"]) == (1, 2, 200_000)
    assert _same_tree(checkpoint, dest)
    # a changed source file (new modification time) is copied again; a half-written copy too
    (checkpoint / "model_index.json").write_text('{"a": 2}')
    (dest / "transformer" / "part-1.safetensors").write_bytes(b"short")
    changed = stage(str(checkpoint), dest)
    assert changed["copied"] == 2 and _same_tree(checkpoint, dest)
    assert not list(dest.rglob("*.partial-*"))


def test_a_single_file_and_a_missing_source(tmp_path, checkpoint):
    one = checkpoint / "transformer" / "part-1.safetensors"
    dest = staged_folder(str(one), str(tmp_path / "l"), "n")
    rec = stage(str(one), dest)
    assert rec["copied"] == 1 and (dest / one.name).read_bytes() == one.read_bytes()
    with pytest.raises(FileNotFoundError, match="does not exist on this node"):
        stage(str(tmp_path / "nope"), tmp_path / "x")


def test_stage_for_node_points_the_plan_at_the_copy(tmp_path, checkpoint):
    cluster = tmp_path / "c.yaml"
    cluster.write_text((ROOT / "clusters" / "local.yaml").read_text().replace("name: local", "name: lc")
                       + f"node_local_dir: {tmp_path}/local/{{node}}\n")
    job = job_from_dict({"name": "s", "model": {"preset": "tiny", "weights": str(checkpoint), "stage": "node"},
                         "workload": {"kind": "verify", "frames": 9, "height": 64, "width": 64}})
    plan = make_plan(find_cluster(str(cluster)), job)
    assert plan.model.stage == "node" and plan.estimates.staging.nodes == 1
    staged, record = stage_for_node(plan, 0, "nodeA", tmp_path / "job")
    assert staged.model.weights == str(staged_folder(str(checkpoint), plan.cluster.node_local_dir, "nodeA"))
    assert record["copied"] == 3 and json.loads((tmp_path / "job" / "stage" / "nodeA.json").read_text()) == record
    # another rank of the node reads the record its first rank wrote
    same, rec2 = stage_for_node(plan, 1, "nodeA", tmp_path / "job")
    assert same.model.weights == staged.model.weights and rec2 == record
    # a node where the source is missing fails with the node's name
    plan_missing = make_plan(find_cluster(str(cluster)), job_from_dict(
        {**job.to_dict(), "model": {"preset": "tiny", "weights": str(tmp_path / "gone"), "stage": "node"}}))
    with pytest.raises(RuntimeError, match=r"staging .*gone to .* on nodeB failed: the weights path .* does not exist"):
        stage_for_node(plan_missing, 0, "nodeB", tmp_path / "job")


def test_bad_settings_are_one_line():
    with pytest.raises(SporchError, match=r"'model.stage' node stages model.weights on each node, but the job has "
                                          r"no model.weights"):
        job_from_dict({"name": "s", "model": {"preset": "tiny", "stage": "node"},
                       "workload": {"frames": 9, "height": 64, "width": 64}})
    with pytest.raises(SporchError, match=r"'model.stage' must be one of shared, node, got 'everywhere'"):
        job_from_dict({"name": "s", "model": {"preset": "tiny", "stage": "everywhere"},
                       "workload": {"frames": 9, "height": 64, "width": 64}})


def test_local_run_loads_the_staged_copy_and_reports_it(tmp_path):
    """A point with model.stage=node: the first rank stages, the 4 ranks load the copy (verify
    passes against the same weights), result.json has the record; a second run reuses it. The
    points run through the launcher's run_point on the session's rank pool (they were `sporch run
    --local` launches; tests/submit/test_stage_live.py stages on the Slurm lab's 4 nodes for real)."""
    from sporch.orchestrator.contract.exit_codes import EXIT_OK
    from tests.runtime.launch.on_ranks import plan_file, result, run_point_on_ranks
    from tests.testutil import tiny_wan_folder

    ckpt = tiny_wan_folder(tmp_path / "ckpt", seed=3)  # config.json + the weights: two files
    cluster = tmp_path / "localstage.yaml"
    cluster.write_text((ROOT / "clusters" / "local.yaml").read_text().replace("name: local", "name: localstage")
                       + f"node_local_dir: {tmp_path}/stage/{{node}}\n")
    records = []
    for i in range(2):
        run_dir = tmp_path / "runs" / str(i)
        plan_path = plan_file(run_dir, f"model.weights={ckpt}", "model.stage=node", cluster=str(cluster))
        assert run_point_on_ranks(plan_path, run_dir) == [EXIT_OK] * 4
        records.append(result(run_dir))
    first, second = (r["metrics"]["staging"] for r in records)
    (node, rec1), = first.items()
    assert rec1["copied"] == 2 and rec1["folder"].startswith(str(tmp_path / "stage" / node))
    assert second[node]["copied"] == 0 and second[node]["reused"] == 2
    assert all(r["status"] == "completed" for r in records)


def test_cleanup_policy_end_removes_the_copy_and_keep_keeps_it(tmp_path, checkpoint):
    from sporch.runtime.stage import clean_up

    for policy, kept in (("keep", True), ("end", False)):
        cluster = tmp_path / f"{policy}.yaml"
        cluster.write_text((ROOT / "clusters" / "local.yaml").read_text().replace("name: local", f"name: {policy}")
                           + f"node_local_dir: {tmp_path}/{policy}/{{node}}\nstage_cleanup: {policy}\n")
        job = job_from_dict({"name": "s", "model": {"preset": "tiny", "weights": str(checkpoint), "stage": "node"},
                             "workload": {"kind": "verify", "frames": 9, "height": 64, "width": 64}})
        plan = make_plan(find_cluster(str(cluster)), job)
        staged, _ = stage_for_node(plan, 0, "n1", tmp_path / f"job-{policy}")
        clean_up(plan, 1, "n1")  # only the node's first rank removes it
        assert Path(staged.model.weights).exists()
        clean_up(plan, 0, "n1")
        assert Path(staged.model.weights).exists() is kept, policy
    bad = tmp_path / "bad.yaml"
    bad.write_text((ROOT / "clusters" / "local.yaml").read_text() + "stage_cleanup: never\n")
    with pytest.raises(SporchError, match=r"'stage_cleanup' must be one of keep, end, got 'never'"):
        find_cluster(str(bad))
