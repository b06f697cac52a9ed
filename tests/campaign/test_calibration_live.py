"""Calibration from real runs: a small campaign (a 2-block model with hidden 128, gloo ranks on
CPU, emulated slurmlab nodes) is measured point by point through orchestrator.local_run (the
`run --local` engine; the campaign runner comes later), `sporch calibrate` fits the cost model
on the single-method points (Ulysses 2, ring 2, dp 2 on one node, two sequence lengths), and
the held-back hybrid points (Ulysses 2 x ring 2 on two nodes) are predicted from a cluster
descriptor that references the calibration file.

Stated error: HELD_BACK_ERROR (60%), and every held-back point better predicted than by the
default constants (which miss these CPU points by 84-87%). Why not tighter: 4 ranks share 2 CPU
cores (with whatever else runs), so a step's time carries scheduler noise the model has no term
for. On a quiet machine the held-back hybrid points landed at -18% and +22% (12-point run) and
+22%/-12% (this 8-point campaign); with other test suites loading the same 2 cores the same point
took 670 ms in one run and 1330 ms in another and the held-back errors reached -53%. Leaving out a
point whose layout had no other point of its kind reached 40% (hence only points whose every term
is determined by the training points are held back).
"""

from __future__ import annotations

import csv
import json
from pathlib import Path

import pytest

from orchestrator.campaign.expand import expand
from orchestrator.campaign.layout import prepare
from orchestrator.campaign.spec import campaign_from_dict
from orchestrator.config.cluster import find_cluster, load_cluster_file
from orchestrator.local_run import run_local
from orchestrator.plan.calibration import load_constants
from orchestrator.plan.cost import cluster_constants, predict_plan
from orchestrator.plan.layouts import compact
from orchestrator.plan.schema import Plan

HELD_BACK_ERROR = 0.60
CAMPAIGN = {
    "name": "calibrate",
    "base": {
        "model": {"preset": "tiny", "hidden": 128, "num_heads": 4, "num_kv_heads": 4, "head_dim": 32, "ffn_dim": 256},
        "workload": {"kind": "benchmark", "batch": 2, "guidance_scale": 1.0, "dtype": "float32", "warmup": 1,
                     "repeat": 3},
    },
    "matrix": {"clusters": ["slurmlab"], "nodes": [1, 2], "shapes": [{"seq_len": 1024}, {"seq_len": 4096}],
               "layouts": [{"ulysses": 2, "ring": 1}, {"ulysses": 1, "ring": 2}, {"dp": 2, "ulysses": 1, "ring": 1},
                           {"ulysses": 2, "ring": 2}]},
}
FIT = "gemm_efficiency,attention_efficiency,ring_merge_bytes,a2a_latency_s,p2p_latency_s,layer_overhead_s"


@pytest.fixture(scope="module")
def campaign_dir(tmp_path_factory):
    root = tmp_path_factory.mktemp("calibration") / "calibrate"
    exp = expand(campaign_from_dict(CAMPAIGN))
    assert len(exp.points) == 8  # 3 layouts on 1 node + 1 on 2 nodes, two shapes; the rest skipped
    cdir = prepare(exp, root)
    for p in exp.points:
        res = run_local(cdir.plan_file(p.id), cdir.point_dir(p.id), timeout_s=300)
        assert res.ok and res.result["status"] == "completed", (p.id, res.result)
    return root


def points(root: Path) -> dict[str, tuple[Plan, dict]]:
    return {d.name: (Plan.load(str(d / "plan.json")), json.loads((d / "result.json").read_text()))
            for d in (root / "points").iterdir()}


@pytest.mark.slow
def test_calibrated_model_predicts_held_back_points(campaign_dir, tmp_path, capsys):
    from orchestrator.cli.main import main

    pts = points(campaign_dir)
    held = sorted(pid for pid, (plan, _) in pts.items() if compact(plan.layout) == "1x1x2x2")
    assert len(held) == 2
    cal = tmp_path / "slurmlab-calibration.yaml"
    args = ["calibrate", str(campaign_dir), "--out", str(cal), "--fit", FIT]
    for pid in held:
        args += ["--exclude", pid]
    assert main(args) == 0
    out = capsys.readouterr().out
    assert "6 points on slurmlab" in out and all(pid not in out for pid in held)

    # a descriptor that references the file: its plans predict with the fitted constants
    desc = tmp_path / "slurmlab-cal.yaml"
    desc.write_text(Path(find_cluster("slurmlab").source).read_text() + f"calibration: {cal.name}\n")
    cluster = load_cluster_file(desc)
    consts, source = cluster_constants(cluster)
    assert consts == {**consts, **load_constants(cal)} and source.startswith("calibration ")
    errors = {}
    for pid in held:
        plan, result = pts[pid]
        measured = result["metrics"]["step_ms_median"] / 1e3
        errors[pid] = predict_plan(plan, consts).step_s / measured - 1
    assert all(abs(e) < HELD_BACK_ERROR for e in errors.values()), errors
    # the defaults (CPU placeholders) are far off: calibration is what brings them close
    defaults = {pid: predict_plan(pts[pid][0]).step_s / (pts[pid][1]["metrics"]["step_ms_median"] / 1e3) - 1
                for pid in held}
    assert all(abs(d) > abs(errors[pid]) for pid, d in defaults.items()), (defaults, errors)


@pytest.mark.slow
def test_report_shows_predicted_beside_measured(campaign_dir, tmp_path):
    from orchestrator.cli.main import main

    assert main(["campaign", "report", str(campaign_dir), "--out", str(tmp_path / "r")]) == 0
    with open(tmp_path / "r" / "table.csv") as fh:
        table = {r["id"]: r for r in csv.DictReader(fh)}
    for pid, (plan, result) in points(campaign_dir).items():
        row = table[pid]
        predicted = plan.estimates["predicted"]["step_s"] * 1e3
        assert float(row["predicted_ms_per_step"]) == pytest.approx(predicted)
        assert float(row["prediction_error"]) == pytest.approx(predicted / float(row["step_ms_median"]) - 1)
