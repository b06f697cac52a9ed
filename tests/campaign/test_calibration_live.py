"""Calibration from real runs on the loopback Slurm lab: a small campaign (a 2-block model with
hidden 128, gloo ranks on CPU; tests/campaign/calibration_campaign.py) runs through `sporch
campaign run` as two job arrays (1 node, 2 nodes) with ``run.throttle: 1`` and ``run.serial:
true``, so one point runs at a time. The cluster descriptor is the lab with ONE fake GPU per node
(``CLUSTER``): the lab's 4 nodes share this machine's 2 CPU cores, so a point never has more ranks
(each limited to its one Slurm CPU) than there are cores. Oversubscribed points (4 ranks on 2
cores) run at half speed, which no cost-model term describes (docs/plan.md, Limits): with the
2-GPU lab, a calibration on 2-rank points missed the 4-rank Ulysses 2 x ring 2 points by -45% and
-72%.

`sporch calibrate` fits the cost model on 9 points (1 rank; and Ulysses 2, ring 2 and dp 2 across
the two nodes, at 1,024 and 4,096 tokens) and the 2-node points at 2,048 tokens, held back, are
predicted from a cluster descriptor that references the calibration file: interpolation in
sequence length, with every term of theirs determined by training points.

Only what the machine's load cannot flip is checked: the whole chain on measured times (arrays,
result files, `sporch calibrate --exclude`, a calibration file whose recorded fit quality is what
its constants make of the 9 measured training times, a descriptor that references the file and
predicts with its constants, the report's predicted-vs-measured columns). How close the held-back
predictions come to their measurements is not judged here: CPU timings on shared cores swing by
2x and more (with a second test suite on the same 2 cores one held-back point measured 339 ms
instead of 186 ms; with six, a 4,096-token point measured faster than its 2,048-token one), and a
burst of load during the held-back points alone would fail any bound on them.
``python bench/calibration_lab.py`` runs the same campaign on the lab and prints the held-back
points predicted beside measured (on a quiet machine: +1%, -1% and +3%; docs/plan.md). Whether
the calibrated model beats the default constants is checked on injected timings with bounded
noise (tests/campaign/test_calibration_injected.py).
"""

from __future__ import annotations

import csv
import json
import math
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from sporch.orchestrator.campaign.expand import expand
from sporch.orchestrator.campaign.spec import campaign_from_dict
from sporch.orchestrator.config.calibration_file import load_constants
from sporch.orchestrator.config.cluster import load_cluster_file
from sporch.orchestrator.plan.cost_constants import cluster_constants
from sporch.orchestrator.plan.plan_prediction import predict_plan
from tests.campaign.calibration_campaign import (CLUSTER_FILE, POINTS, calibrate_args, calibrated_descriptor,
                                                 is_held_back, points, write_campaign)

pytestmark = [pytest.mark.slurm, pytest.mark.slow]

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def campaign_dir(slurm_cluster, tmp_path_factory):
    """The campaign through `sporch campaign run` on the lab (waits until every point is done)."""
    folder = tmp_path_factory.mktemp("calibration")
    path, doc = write_campaign(folder)
    exp = expand(campaign_from_dict(doc))
    assert len(exp.points) == POINTS
    env = {**os.environ, "PYTHONPATH": str(REPO), "SPORCH_HOME": str(folder / "home")}
    cli = [sys.executable, "-m", "sporch.orchestrator.cli.main", "campaign", "run", str(path), "--interval", "1"]
    try:
        p = subprocess.run(cli, cwd=folder, env=env, capture_output=True, text=True, timeout=900)
    finally:
        cancel_arrays(folder / "calibrate")
    assert p.returncode == 0 and f"{POINTS} done" in p.stderr, p.stdout + p.stderr
    root = folder / "calibrate"
    state = json.loads((root / "state.json").read_text())
    arrays = state["arrays"]
    assert len(arrays) == 2  # one array per node count, the second waiting for the first
    script = Path(arrays[1]["root"]) / "arrays" / f"{arrays[1]['group']}.{arrays[1]['n']}.sbatch"
    assert f"#SBATCH --dependency=afterany:{arrays[0]['job_id']}\n" in script.read_text()
    assert all("%1\n" in (Path(a["root"]) / "arrays" / f"{a['group']}.{a['n']}.sbatch").read_text()
               for a in arrays)
    for pid in (p.id for p in exp.points):
        res = json.loads((root / "points" / pid / "result.json").read_text())
        assert res["status"] == "completed" and res["provenance"]["slurm_array_job_id"], pid
        for rank in (root / "points" / pid / "ranks").glob("rank*.json"):  # one CPU a rank, as Slurm gave
            assert json.loads(rank.read_text())["threads"] == 1, rank
    return root


def cancel_arrays(root: Path) -> None:
    """Nothing of this module stays in the lab's queue (a failed or timed-out run)."""
    from sporch.orchestrator.slurm.commands import scancel

    state = root / "state.json"
    if state.is_file():
        ids = [a["job_id"] for a in json.loads(state.read_text())["arrays"]]
        if ids:
            scancel(ids)


@pytest.fixture(scope="module")
def calibrated(campaign_dir, tmp_path_factory):
    """`sporch calibrate` on the 9 training points (the held-back ones excluded), and a descriptor
    that references the file: (CLI output, calibration file, held-back ids, the descriptor's
    constants and their source)."""
    held = sorted(pid for pid, (plan, _) in points(campaign_dir).items() if is_held_back(plan))
    assert len(held) == 3
    folder = tmp_path_factory.mktemp("calibrated")
    cal = folder / "slurmlab-calibration.yaml"
    cli = [sys.executable, "-m", "sporch.orchestrator.cli.main", *calibrate_args(campaign_dir, cal, held)]
    p = subprocess.run(cli, env={**os.environ, "PYTHONPATH": str(REPO)}, capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stdout + p.stderr
    consts, source = cluster_constants(load_cluster_file(calibrated_descriptor(folder, cal.name)))
    return p.stdout, cal, held, consts, source


def test_calibration_fits_the_training_points_and_the_descriptor_uses_it(campaign_dir, calibrated):
    """What noise cannot flip: the fit saw the 9 training points only, and a descriptor that
    references the file predicts with its constants."""
    out, cal, held, consts, source = calibrated
    assert "9 points on slurmlab-1gpu" in out and all(pid not in out for pid in held)
    assert consts == {**consts, **load_constants(cal)} and source.startswith("calibration ")
    defaults, _ = cluster_constants(load_cluster_file(campaign_dir.parent / CLUSTER_FILE))
    assert consts != defaults
    for plan, _ in points(campaign_dir).values():
        assert 0 < predict_plan(plan, consts).step_s < math.inf


def test_the_files_fit_quality_is_what_its_constants_make_of_the_measured_times(campaign_dir, calibrated):
    """The calibration file's rms and max relative error are those of its constants on the 9
    training points' measured medians (whatever the machine's load made them), and the held-back
    points are not among them."""
    _, cal, held, consts, _ = calibrated
    doc = yaml.safe_load(cal.read_text())
    errors = [predict_plan(plan, consts).step_s / (result["metrics"]["step_ms_median"] / 1e3) - 1
              for pid, (plan, result) in sorted(points(campaign_dir).items()) if pid not in held]
    assert doc["points"] == len(errors) == 9
    # the file rounds the constants to 6 significant digits and the errors to 6 decimals
    assert doc["rms_relative_error"] == pytest.approx(math.sqrt(sum(e * e for e in errors) / 9), abs=1e-5)
    assert doc["max_relative_error"] == pytest.approx(max(abs(e) for e in errors), abs=1e-5)


def test_report_shows_predicted_beside_measured(campaign_dir, tmp_path):
    from sporch.orchestrator.cli.main import main

    assert main(["campaign", "report", str(campaign_dir), "--out", str(tmp_path / "r")]) == 0
    with open(tmp_path / "r" / "table.csv") as fh:
        table = {r["id"]: r for r in csv.DictReader(fh)}
    for pid, (plan, result) in points(campaign_dir).items():
        row = table[pid]
        predicted = plan.estimates.predicted.step_s * 1e3
        assert float(row["predicted_ms_per_step"]) == pytest.approx(predicted)
        assert float(row["prediction_error"]) == pytest.approx(predicted / float(row["step_ms_median"]) - 1)
