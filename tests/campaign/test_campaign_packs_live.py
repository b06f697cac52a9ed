"""Packed points on the loopback Slurm lab (issue 20 item 1): a 6-point tiny campaign (1 and 2
nodes x 3 layouts, one shape: 3 points a pack) runs as one array task per resource group; a pack
task killed mid-way is resumed by a re-run without redoing its finished points; a point that
fails inside a pack leaves the others' results.

The CLI runs as a subprocess with counting wrappers for ``sbatch`` and ``squeue`` (the helpers
of test_campaign_run.py).
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from sporch.orchestrator.campaign.expand import expand
from sporch.orchestrator.campaign.spec import campaign_from_dict
from tests.campaign.test_campaign_run import BASE, LAYOUTS, SHAPES, Cli, calls, counting_wrappers, wait_for
from tests.runtime.launch.local_cli import hooks_env

pytestmark = [pytest.mark.slurm, pytest.mark.slow]

REPO = Path(__file__).resolve().parents[2]


def write(folder: Path, name: str, base: dict, **matrix) -> tuple[Path, dict]:
    doc = {"name": name, "output_dir": str(folder / "campaigns"), "base": base,
           "matrix": {"clusters": ["slurmlab"], "nodes": [1, 2], "layouts": LAYOUTS, "shapes": SHAPES[:1], **matrix},
           "run": {"retries": 1}}
    path = folder / f"{name}.yaml"
    path.write_text(json.dumps(doc, indent=1))
    return path, doc


def packs_of(sbatch_argv: list[str]) -> list[list[str]]:
    """The point ids of each pack (array task) of a packed submission."""
    listing = Path(sbatch_argv[-1]).with_suffix(".list")
    return [[Path(line).name for line in Path(pack).read_text().splitlines()]
            for pack in listing.read_text().splitlines()]


@pytest.fixture(scope="module")
def lab(slurm_cluster, tmp_path_factory):
    root = tmp_path_factory.mktemp("campaign-packs")
    bin_dir = counting_wrappers(root)
    env = {**os.environ, **hooks_env(), "PATH": f"{bin_dir}:{os.environ['PATH']}", "SPORCH_HOME": str(root / "home")}
    yield root, Cli(root, env)
    from sporch.orchestrator.slurm.commands import scancel

    for state in (root / "campaigns").glob("*/state.json"):
        scancel([a["job_id"] for a in json.loads(state.read_text())["arrays"]])


def test_a_packed_campaign_is_one_task_per_group_and_a_killed_pack_resumes(lab):
    from sporch.orchestrator.slurm.commands import scancel
    from sporch.orchestrator.slurm.query import squeue_states

    root, cli = lab
    base = {**BASE, "workload": {**BASE["workload"], "repeat": 6}}  # a few seconds a point
    path, doc = write(root, "pack6", base)
    cdir = root / "campaigns" / "pack6"
    p = cli("campaign", "run", path, "--detach")
    assert p.returncode == 0, p.stderr
    subs = calls(root, "sbatch")
    manifest = json.loads((cdir / "manifest.json").read_text())
    assert len(manifest["points"]) == 6 and len(subs) == 2
    # one pack (one array task) per group, holding all of its points in matrix order
    assert sorted(packs_of(s)[0] for s in subs) == sorted(g["points"] for g in manifest["groups"].values())
    assert all(len(packs_of(s)) == 1 for s in subs)
    arrays = json.loads((cdir / "state.json").read_text())["arrays"]
    tasks = json.loads((cdir / "state.json").read_text())["points"]
    assert {pid: rec["task"] for pid, rec in tasks.items()} == {
        pid: f"{a['job_id']}_0" for a in arrays for pid in a["points"]}

    # kill one pack once its first point is done
    first = arrays[0]
    pack = first["packs"][0]

    def one_done():
        return [pid for pid in pack if (cdir / "points" / pid / "result.json").is_file()
                and json.loads((cdir / "points" / pid / "result.json").read_text())["status"] == "completed"]

    wait_for(one_done, 400, "the first point of a pack to finish")
    task = f"{first['job_id']}_0"
    scancel([task])
    wait_for(lambda: squeue_states([first["job_id"]], array=True).get(task) is None
             or squeue_states([first["job_id"]], array=True)[task].terminal, 120, f"{task} to end")
    finished = one_done()
    stamps = {pid: (cdir / "points" / pid / "result.json").stat().st_mtime_ns for pid in finished}
    left = [pid for pid in pack if pid not in finished]

    # the re-run waits for the other pack, resubmits the killed pack's unfinished points only
    p = cli("campaign", "run", path, "--interval", "1", timeout=900)
    assert p.returncode == 0, p.stderr
    assert "6 done" in p.stderr
    subs = calls(root, "sbatch")
    if left:
        assert len(subs) == 3 and packs_of(subs[2]) == [left]
    assert {pid: (cdir / "points" / pid / "result.json").stat().st_mtime_ns for pid in finished} == stamps
    results = {pid: json.loads((cdir / "points" / pid / "result.json").read_text()) for pid in manifest["points"]}
    assert all(r["status"] == "completed" for r in results.values())
    # the points of the pack that was not killed ran in one job, one weight load among them
    other = arrays[1]["packs"][0]
    assert len({results[pid]["provenance"]["slurm_job_id"] for pid in other}) == 1
    loads = [results[pid]["metrics"]["weight_cache"] for pid in other]
    assert [w["loads"] for w in loads] == [1] * len(other) and [w["hits"] for w in loads] == list(range(len(other)))
    for pid in other:  # every point has its own rank logs
        logs = cdir / "points" / pid / "logs"
        assert sorted(f.suffix for f in logs.iterdir()).count(".err") == results[pid]["world_size"]


def test_a_point_that_fails_inside_a_pack_leaves_the_others(lab):
    root, cli = lab
    base = {**BASE, "entrypoint": "launch_hooks:fail_named"}
    path, doc = write(root, "packfail", base, nodes=[1])
    ids = [p.id for p in expand(campaign_from_dict(doc)).points]
    assert len(ids) == 3
    bad = ids[1]
    before = len(calls(root, "sbatch"))
    cli.env["SPORCH_TEST_FAIL_POINT"] = bad
    try:
        p = cli("campaign", "run", path, "--interval", "1", timeout=600)
    finally:
        del cli.env["SPORCH_TEST_FAIL_POINT"]
    assert p.returncode == 1 and "2 done" in p.stderr and "1 failed" in p.stderr, p.stderr
    assert len(calls(root, "sbatch")) == before + 1
    cdir = root / "campaigns" / "packfail"
    results = {pid: json.loads((cdir / "points" / pid / "result.json").read_text()) for pid in ids}
    assert [results[pid]["status"] for pid in ids] == ["completed", "failed", "completed"]
    assert f"injected failure of point {bad}" in results[bad]["error"]
    assert results[ids[2]]["metrics"]["ran"].endswith(ids[2])
    st = json.loads(cli("campaign", "status", cdir, "--json").stdout)
    assert st["points"][bad] == "failed" and f"injected failure of point {bad}" in st["failed"][bad]
