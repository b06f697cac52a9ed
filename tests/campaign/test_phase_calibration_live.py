"""Every phase calibrated from real runs on the loopback Slurm lab (issue 49): the tiny generate job
twice on one rank (tests/campaign/phase_calibration_campaign.py), each point its own Slurm job, one
at a time. The runtime times the phases (result.json's metrics.stages, the start-up included);
`sporch calibrate` fits their constants; a descriptor that references the file plans the job with
them; the report shows each phase measured beside the plan's prediction.

Only what the machine's load cannot flip is checked: every phase measured, the file holding each
phase's measured mean and what its constants make of it, a re-plan predicting with the file's
constants, the report's cells. How close the calibrated phases come to the measured ones is printed
by ``python bench/phase_calibration_lab.py`` (CPU timings on shared cores swing: docs/plan.md).
"""

from __future__ import annotations

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
from sporch.orchestrator.config.job import job_from_dict
from sporch.orchestrator.plan.cost_constants import cluster_constants
from sporch.orchestrator.plan.plan_prediction import predict_plan
from sporch.orchestrator.plan.planner import make_plan
from tests.campaign.calibration_campaign import points
from tests.campaign.phase_calibration_campaign import (PHASES, POINTS, calibrated_descriptor, measured_phases,
                                                       write_campaign)
from tests.campaign.test_calibration_live import cancel_arrays

pytestmark = [pytest.mark.slurm, pytest.mark.slow]

REPO = Path(__file__).resolve().parents[2]
#: What two runs of one point determine: each phase's own fixed cost, the steps' per-layer overhead.
FIT = "layer_overhead_s,startup_s,load_fixed_s,encode_fixed_s,decode_fixed_s,save_fixed_s"


def sporch(*args: str, cwd: Path, timeout: float) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(REPO), "SPORCH_HOME": str(cwd / "home")}
    return subprocess.run([sys.executable, "-m", "sporch.orchestrator.cli.main", *args], cwd=cwd, env=env,
                          capture_output=True, text=True, timeout=timeout)


@pytest.fixture(scope="module")
def lab_points(slurm_cluster, tmp_path_factory):
    """The campaign run on the lab, calibrated: (folder, campaign root, `calibrate`'s output, file)."""
    folder = tmp_path_factory.mktemp("phases")
    path, doc = write_campaign(folder)
    assert len(expand(campaign_from_dict(doc)).points) == POINTS
    try:
        p = sporch("campaign", "run", str(path), "--interval", "1", cwd=folder, timeout=900)
    finally:
        cancel_arrays(folder / "phases")
    assert p.returncode == 0 and f"{POINTS} done" in p.stderr, p.stdout + p.stderr
    root, cal = folder / "phases", folder / "slurmlab-phases.yaml"
    c = sporch("calibrate", str(root), "--out", str(cal), "--fit", FIT, cwd=folder, timeout=300)
    assert c.returncode == 0, c.stdout + c.stderr
    return folder, root, c.stdout, cal


def test_every_phase_is_measured_and_calibrated(lab_points):
    folder, root, out, cal = lab_points
    measured = {pid: measured_phases(result) for pid, (_, result) in points(root).items()}
    assert all(set(m) == set(PHASES) and all(s > 0 for s in m.values()) for m in measured.values()), measured
    assert "2 points on slurmlab-1gpu" in out and all(f"│ {ph}" in out for ph in PHASES if ph != "denoise")
    doc = yaml.safe_load(cal.read_text())
    assert doc["points"] == POINTS and doc["measurements"] == POINTS * len(PHASES)
    for ph in PHASES:  # the file holds each phase: its points, measured mean, calibrated mean
        values = [m[ph] for m in measured.values()]
        assert doc["phases"][ph]["points"] == POINTS
        assert doc["phases"][ph]["measured_s"] == pytest.approx(sum(values) / POINTS, rel=1e-5)
    consts, source = cluster_constants(load_cluster_file(calibrated_descriptor(folder, cal.name)))
    assert source.startswith("calibration ") and consts == {**consts, **load_constants(cal)}
    for plan, _ in points(root).values():  # the file's calibrated means are what its constants make
        pred = predict_plan(plan, consts)
        for ph in PHASES:
            assert pred.phase(ph) > 0
    predicted = {ph: sum(predict_plan(plan, consts).phase(ph) for plan, _ in points(root).values()) / POINTS
                 for ph in PHASES}
    assert {ph: doc["phases"][ph]["predicted_s"] for ph in PHASES} == pytest.approx(predicted, rel=1e-4)


def test_a_replan_predicts_with_the_calibration(lab_points):
    """The same job planned again on a descriptor that references the file: its phases are the
    calibrated constants' (the point's plan.json, made with the defaults, predicts otherwise)."""
    folder, root, _, cal = lab_points
    plan, _ = next(iter(points(root).values()))
    desc = load_cluster_file(calibrated_descriptor(folder, cal.name))
    replan = make_plan(desc, job_from_dict(plan.job.spec, "job"))
    replanned = replan.estimates.predicted
    assert replanned.constants.startswith("calibration ")
    # the re-plan's own inputs: it reads the tiny weights' folder, which the point's plan (made before
    # the first point wrote it) sized from the family's defaults
    assert replanned.phases_s.to_dict() == pytest.approx(
        dict(predict_plan(replan, cluster_constants(desc)[0]).phases), rel=1e-5, abs=1e-6)  # recorded to 1e-6 s
    assert replanned.phases_s.startup != plan.estimates.predicted.phases_s.startup


def test_the_report_sets_each_phase_beside_its_prediction(lab_points, tmp_path, monkeypatch):
    """table.csv holds each phase measured (stage_<phase>_s) and predicted (predicted_<phase>_s, the
    point's plan.json); the terminal's phases table shows them as ``measured / predicted``."""
    import csv

    from sporch.orchestrator.cli.show_prediction import ms_text

    _, root, _, _ = lab_points
    monkeypatch.setenv("COLUMNS", "200")
    p = sporch("campaign", "report", str(root), "--out", str(tmp_path / "r"), cwd=tmp_path, timeout=300)
    assert p.returncode == 0, p.stdout + p.stderr
    assert "phases: measured / predicted seconds" in p.stdout
    with open(tmp_path / "r" / "table.csv") as fh:
        table = {r["id"]: r for r in csv.DictReader(fh)}
    for pid, (plan, result) in points(root).items():
        predicted, measured = plan.estimates.predicted.phases_s.to_dict(), measured_phases(result)
        line = next(line for line in p.stdout.splitlines() if line.startswith(f"│ {pid}") and " / " in line)
        for ph in PHASES:
            assert float(table[pid][f"predicted_{ph}_s"]) == pytest.approx(predicted[ph])
            assert float(table[pid][f"stage_{ph}_s"]) == pytest.approx(measured[ph])
            assert f"{ms_text(measured[ph])} / {ms_text(predicted[ph])}" in line, (ph, line)
