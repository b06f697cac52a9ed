"""The campaign directory and the job-array script of a resource group (golden file)."""

from __future__ import annotations

import json
import subprocess

import pytest

from sporch.orchestrator.campaign.arrays import render_array, write_array
from sporch.orchestrator.campaign.expand import expand
from sporch.orchestrator.campaign.groups import group_points
from sporch.orchestrator.campaign.folder import CampaignDir, prepare
from sporch.orchestrator.campaign.spec import load_campaign
from sporch.orchestrator.config.cluster import load_cluster_file
from sporch.orchestrator.config.job import load_job
from sporch.orchestrator.errors import SporchError
from sporch.orchestrator.plan.planner import make_plan
from sporch.orchestrator.contract.plan import Plan
from tests.testutil import EXAMPLES, GOLDEN_JOB_DIR, container_cluster, golden_dir, update_golden
GOLDEN = golden_dir(__file__)


def wan_group(nodes=2):
    exp = expand(load_campaign(EXAMPLES / "campaigns" / "wan14b-720p.yaml"))
    return next(g for g in group_points(exp.points) if g.shape["nodes"] == nodes)


def test_golden_array_script():
    g = wan_group()
    text = render_array(g.points[0].plan, campaign="wan14b-720p-scaling", group=g.key, root=GOLDEN_JOB_DIR,
                        list_path=f"{GOLDEN_JOB_DIR}/arrays/{g.key}.0.list", count=len(g.points), throttle=4)
    path = GOLDEN / "campaign_array_a100x32_n2.sbatch"
    if update_golden():
        path.write_text(text)
        pytest.skip("golden regenerated")
    assert text == path.read_text(), f"golden {path.name} differs; SPORCH_UPDATE_GOLDEN=1 regenerates it"
    lines = text.splitlines()
    assert f"#SBATCH --array=0-{len(g.points) - 1}%4" in lines
    assert "#SBATCH --nodes=2" in lines and "#SBATCH --ntasks-per-node=8" in lines
    assert f"#SBATCH --output={GOLDEN_JOB_DIR}/arrays/logs/%A_%a.out" in lines
    assert 'export SPORCH_JOB_DIR="$POINT_DIR"' in lines
    r = subprocess.run(["bash", "-n"], input=text, text=True, capture_output=True)
    assert r.returncode == 0, r.stderr


@pytest.mark.parametrize("runtime", ["pyxis", "apptainer", "podman"])
def test_golden_array_script_in_a_container(runtime, tmp_path):
    """Every array task's ranks run in the cluster's container, the campaign folder (every
    point's folder is under it) mounted at its own path (issue 19 item 1)."""
    plan = make_plan(load_cluster_file(container_cluster(tmp_path, runtime)),
                     load_job(EXAMPLES / "tiny.yaml", ["parallel.ring=2", "parallel.ulysses=4"]))
    text = render_array(plan, campaign="tiny-ctr", group="g1", root=GOLDEN_JOB_DIR,
                        list_path=f"{GOLDEN_JOB_DIR}/arrays/g1.0.list", count=3, throttle=2)
    path = GOLDEN / f"campaign_array_container_{runtime}.sbatch"
    if update_golden():
        path.write_text(text)
        pytest.skip("golden regenerated")
    assert text == path.read_text(), f"golden {path.name} differs; SPORCH_UPDATE_GOLDEN=1 regenerates it"
    assert f"{GOLDEN_JOB_DIR}:{GOLDEN_JOB_DIR}" in text
    assert text.rstrip().endswith('/opt/conda/bin/python -m sporch.runtime.launch --plan "$POINT_DIR/plan.json"')
    r = subprocess.run(["bash", "-n"], input=text, text=True, capture_output=True)
    assert r.returncode == 0, r.stderr


def test_array_maps_task_ids_to_point_plans(tmp_path):
    """Run the script's own lookup line for every task id: each finds its point's plan."""
    exp = expand(load_campaign(EXAMPLES / "campaigns" / "tiny.yaml"))
    g = group_points(exp.points)[1]
    spaced = prepare(exp, tmp_path / "my campaign")  # #SBATCH lines cannot quote: refused, one line
    with pytest.raises(SporchError, match="without whitespace"):
        write_array(spaced, g, [g.points[0].id], 0, campaign="tiny-scaling")
    cdir = prepare(exp, tmp_path / "c$(x);q")  # shell metacharacters: quoted for the shell (a quote is refused: sbatch strips it)
    ids = [p.id for p in g.points][1:]  # a resubmission of some points only
    list_path, script = write_array(cdir, g, ids, 3, campaign="tiny-scaling", throttle=None)
    assert list_path.name == f"{g.key}.3.list" and script.name == f"{g.key}.3.sbatch"
    text = script.read_text()
    assert f"#SBATCH --array=0-{len(ids) - 1}\n" in text
    lookup = next(line for line in text.splitlines() if line.startswith("POINT_DIR="))
    for task, pid in enumerate(ids):
        out = subprocess.run(["bash", "-c", f"{lookup}; cat \"$POINT_DIR/plan.json\""], text=True,
                             capture_output=True, env={"SLURM_ARRAY_TASK_ID": str(task), "PATH": "/usr/bin:/bin"})
        plan = Plan.from_json(out.stdout)
        assert plan.job.name == f"tiny-scaling-{pid}"


def test_prepare_writes_points_and_keeps_finished_ones(tmp_path):
    c = load_campaign(EXAMPLES / "campaigns" / "tiny.yaml")
    exp = expand(c)
    cdir = prepare(exp, tmp_path / "c")
    manifest = json.loads(cdir.manifest.read_text())
    assert sorted(manifest["points"]) == sorted(p.id for p in exp.points)
    assert (cdir.root / "campaign.yaml").read_text() == (EXAMPLES / "campaigns" / "tiny.yaml").read_text()
    done = exp.points[0].id
    cdir.result_file(done).write_text('{"status": "completed"}')
    plan_before = cdir.plan_file(done).read_text()
    cdir.plan_file(done).write_text("kept")
    prepare(exp, cdir.root)
    assert cdir.plan_file(done).read_text() == "kept"  # finished points are never rewritten
    other = exp.points[1].id
    assert Plan.from_json(cdir.plan_file(other).read_text()).to_json() == exp.points[1].plan.to_json()
    assert plan_before == exp.points[0].plan.to_json()
    assert isinstance(cdir, CampaignDir) and len(list(cdir.point_dirs())) == len(exp.points)


def test_serial_arrays_wait_for_the_clusters_arrays_still_out(tmp_path):
    """run.serial: a new array depends (afterany) on the same cluster's arrays whose points
    have not ended; ended arrays and other clusters' arrays are not waited for."""
    from sporch.orchestrator.campaign.runner import arrays_out
    from sporch.orchestrator.campaign.track import CampaignState

    exp = expand(load_campaign(EXAMPLES / "campaigns" / "tiny.yaml"))
    g = group_points(exp.points)[0]
    cdir = prepare(exp, tmp_path / "c")
    _, script = write_array(cdir, g, [g.points[0].id], 1, campaign="tiny", after=["41", "42"])
    assert "#SBATCH --dependency=afterany:41:42\n" in script.read_text()
    _, script = write_array(cdir, g, [g.points[0].id], 2, campaign="tiny")
    assert "--dependency" not in script.read_text()
    with pytest.raises(SporchError, match="not a Slurm job id"):
        write_array(cdir, g, [g.points[0].id], 3, campaign="tiny", after=["42;touch x"])

    state = CampaignState(arrays=[], points={})
    for job, cluster, pids in (("41", "lab", ["a", "b"]), ("42", "lab", ["c"]), ("43", "other", ["d"])):
        state.arrays.append({"job_id": job, "group": "g", "cluster": cluster, "n": 1, "points": pids})
        for i, pid in enumerate(pids):
            state.started(pid, f"{job}_{i}")
    state.started("c", "44_0")  # c was resubmitted since: 42 no longer holds a point
    state.arrays.append({"job_id": "44", "group": "g", "cluster": "lab", "n": 2, "points": ["c"]})
    state.ended("a", "COMPLETED")
    assert arrays_out(state, "lab") == ["41", "44"]
    state.ended("b", "FAILED")
    assert arrays_out(state, "lab") == ["44"] and arrays_out(state, "other") == ["43"]
