"""Packed points (``run.pack``): the packs of a group, the array script that runs one pack per
task (golden file), its lookup lines run by bash, and the state that maps points to tasks."""

from __future__ import annotations

import json
import subprocess

import pytest

from sporch.orchestrator.campaign.arrays import render_pack_array, write_array
from sporch.orchestrator.campaign.expand import expand
from sporch.orchestrator.campaign.folder import prepare
from sporch.orchestrator.campaign.groups import group_points
from sporch.orchestrator.campaign.intents import new_intent
from sporch.orchestrator.campaign.packs import make_packs, pack_limit, pack_time
from sporch.orchestrator.campaign.spec import campaign_from_dict, load_campaign
from sporch.orchestrator.campaign.track import CampaignState
from sporch.orchestrator.contract.exit_codes import EXIT_PACK_FAILED
from sporch.orchestrator.errors import SporchError
from tests.testutil import EXAMPLES, GOLDEN_JOB_DIR, golden_dir, update_golden

GOLDEN = golden_dir(__file__)


def wan_group(nodes=2):
    exp = expand(load_campaign(EXAMPLES / "campaigns" / "wan14b-720p.yaml"))
    return next(g for g in group_points(exp.points) if g.shape["nodes"] == nodes)


def test_packs_cut_in_matrix_order_and_add_up_their_time():
    ids = [f"p{i}" for i in range(7)]
    assert make_packs(ids, None) == [ids]
    assert make_packs(ids, 3) == [ids[0:3], ids[3:6], ids[6:7]]
    assert make_packs(ids, 100) == [ids]
    # the points' limits add up to at most the pack's: 20 min a point, 1 h a pack
    assert make_packs(ids, None, point_time="00:20:00", max_time="01:00:00") == [ids[0:3], ids[3:6], ids[6:7]]
    assert make_packs(ids, 2, point_time="00:20:00", max_time="01:00:00") == [ids[0:2], ids[2:4], ids[4:6], ids[6:]]
    assert make_packs(ids, None, point_time="10:00:00", max_time="08:00:00") == [[i] for i in ids]  # one at least
    assert pack_time("00:05:00", 12) == "01:00:00"
    assert pack_time("10:00:00", 3) == "1-06:00:00"
    assert pack_time("90", 2) == "03:00:00"  # minutes, Slurm's plain form


def test_a_pack_never_asks_for_more_than_the_partition_allows():
    assert pack_limit("08:00:00", "02:00:00") == "02:00:00"
    assert pack_limit("08:00:00", "2-00:00:00") == "08:00:00"
    assert pack_limit("08:00:00", None) == "08:00:00"  # unlimited


@pytest.mark.slurm
def test_the_labs_partition_limit_is_read(slurm_cluster):
    from sporch.orchestrator.slurm.discover import partition_max_time

    assert partition_max_time("lab") == "02:00:00" == partition_max_time()  # lab is the default
    assert partition_max_time("no-such-partition") is None


def test_pack_size_is_checked():
    doc = {"name": "c", "base": {"model": {"preset": "tiny"}, "workload": {"frames": 5, "height": 32, "width": 32}},
           "matrix": {"clusters": ["local"]}, "run": {"pack_size": 0}}
    with pytest.raises(SporchError, match="run.pack_size'? must be >= 1"):
        campaign_from_dict(doc)
    with pytest.raises(SporchError, match="run.pack_time'? must be a Slurm time"):
        campaign_from_dict({**doc, "run": {"pack_time": "soon"}})
    run = campaign_from_dict({**doc, "run": {}}).spec.run
    assert run.pack is True and run.pack_time == "08:00:00"  # the defaults


def test_golden_pack_script():
    g = wan_group()
    n = len(g.points)
    text = render_pack_array(g.points[0].plan, campaign="wan14b-720p-scaling", group=g.key, root=GOLDEN_JOB_DIR,
                             list_path=f"{GOLDEN_JOB_DIR}/arrays/{g.key}.0.list", packs=[n], throttle=None)
    path = GOLDEN / "campaign_pack_a100x32_n2.sbatch"
    if update_golden():
        path.write_text(text)
        pytest.skip("golden regenerated")
    assert text == path.read_text(), f"golden {path.name} differs; SPORCH_UPDATE_GOLDEN=1 regenerates it"
    lines = text.splitlines()
    assert "#SBATCH --array=0-0" in lines and "#SBATCH --nodes=2" in lines
    point_time = g.points[0].plan.job.time or g.points[0].plan.cluster.slurm.time
    assert f"#SBATCH --time={pack_time(point_time, n)}" in lines  # the points' limits added up
    assert any("-m sporch.runtime.pack --list \"$PACK_LIST\" --attempt \"$SLURM_JOB_ID\"" in line for line in lines)
    assert f'    elif [ "$rc" -eq {EXIT_PACK_FAILED} ]; then' in lines
    r = subprocess.run(["bash", "-n"], input=text, text=True, capture_output=True)
    assert r.returncode == 0, r.stderr


def test_each_task_finds_its_packs_point_plans(tmp_path):
    """Run the script's own lookup line for every task id: each finds its pack's list, whose
    lines are the pack's point folders."""
    exp = expand(load_campaign(EXAMPLES / "campaigns" / "tiny.yaml"))
    g = max(group_points(exp.points), key=lambda g: len(g.points))
    cdir = prepare(exp, tmp_path / "c$(x);q")
    ids = [p.id for p in g.points]
    packs = make_packs(ids, 1) if len(ids) < 3 else make_packs(ids, 2)
    list_path, script = write_array(cdir, g, ids, 1, campaign="tiny-scaling", packs=packs)
    text = script.read_text()
    assert f"#SBATCH --array=0-{len(packs) - 1}\n" in text
    lookup = next(line for line in text.splitlines() if line.startswith("PACK_LIST="))
    for task, pack in enumerate(packs):
        out = subprocess.run(["bash", "-c", f"{lookup}; cat \"$PACK_LIST\""], text=True, capture_output=True,
                             env={"SLURM_ARRAY_TASK_ID": str(task), "PATH": "/usr/bin:/bin"})
        folders = out.stdout.splitlines()
        assert [f.rsplit("/", 1)[-1] for f in folders] == pack
        assert all(json.loads(open(f"{f}/plan.json").read())["job"]["name"] == f"tiny-scaling-{pid}"
                   for f, pid in zip(folders, pack))
    with pytest.raises(SporchError, match="do not hold its points in order"):
        write_array(cdir, g, ids, 2, campaign="tiny-scaling", packs=[list(reversed(ids))])


def test_the_points_of_a_pack_share_its_task(tmp_path):
    state = CampaignState()
    intent = new_intent(state, group="g", cluster="lab", n=1, points=["a", "b", "c"], root="/r", remote=None,
                        packs=[["a", "b"], ["c"]])
    state.record_array(intent, "77")
    assert {pid: state.point(pid)["task"] for pid in "abc"} == {"a": "77_0", "b": "77_0", "c": "77_1"}
    assert state.arrays[0]["packs"] == [["a", "b"], ["c"]]
    (tmp_path / "state.json").write_text(json.dumps({"arrays": [{**state.arrays[0], "packs": [["a"], "c"]}]}))

    class Dir:
        state = tmp_path / "state.json"

    with pytest.raises(SporchError, match="'packs' of a submission must be a list of lists"):
        CampaignState.load(Dir)


def test_campaign_plan_shows_the_packs(tmp_path):
    from sporch.orchestrator.cli.main import main

    doc = {"name": "c", "base": {"model": {"preset": "tiny"}, "workload": {"frames": 5, "height": 32, "width": 32},
                                 "resources": {"time": "00:20:00"}},
           "matrix": {"clusters": ["slurmlab"], "nodes": [1], "layouts": "all",
                      "shapes": [{"frames": 5, "height": 32, "width": 32}, {"frames": 5, "height": 32, "width": 64}]},
           "run": {"pack_time": "00:40:00"}}
    path = tmp_path / "c.yaml"
    path.write_text(json.dumps(doc))
    import contextlib
    import io

    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        assert main(["campaign", "plan", str(path), "--json"]) == 0
    (group,) = json.loads(out.getvalue())["groups"]
    ids = [p["id"] for p in group["points"]]
    assert len(ids) > 2 and group["packs"] == make_packs(ids, None, point_time="00:20:00", max_time="00:40:00")
    assert all(len(p) <= 2 for p in group["packs"])  # 20 min a point, 40 min a pack
