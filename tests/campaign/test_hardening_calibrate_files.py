"""Issue 32 items 3 and 14 for ``sporch calibrate``: ``--out`` follows the one rule (an existing
file or link is refused without --force; with it a link is replaced, its target untouched; the
default file in the campaign folder is sporch's own and is replaced), and a point whose
plan.json is not a Plan (replaced by ``{"x": 1}``, truncated, a FIFO, missing) is one line
naming the file, never an internal error."""

from __future__ import annotations

import json
import os
import threading

import pytest

from sporch.orchestrator.campaign.expand import expand
from sporch.orchestrator.campaign.folder import prepare
from sporch.orchestrator.campaign.spec import load_campaign
from sporch.orchestrator.plan.cost_constants import cluster_constants
from sporch.orchestrator.plan.plan_prediction import predict_plan
from tests.campaign.calibration_campaign import FIT, write_campaign

VICTIM = "name: the-users-cluster  # a cluster descriptor: must not change\n"


@pytest.fixture
def measured(tmp_path):
    """A prepared calibration campaign whose points all "measured" 1.2x the default prediction."""
    path, _ = write_campaign(tmp_path)
    exp = expand(load_campaign(path))
    cdir = prepare(exp, tmp_path / "calibrate")
    for p in exp.points:
        consts, _ = cluster_constants(p.plan.cluster)
        step_ms = predict_plan(p.plan, consts).step_s * 1.2e3
        cdir.result_file(p.id).write_text(json.dumps({"status": "completed", "metrics": {"step_ms_median": step_ms}}))
    return cdir, [p.id for p in exp.points]


def one_line(code, err, *words):
    assert code == 2 and len(err.strip().splitlines()) == 1 and "Traceback" not in err, err
    assert "internal error" not in err, err
    for w in words:
        assert w in err, err


def test_calibrate_out_follows_the_one_rule(measured, tmp_path, run_cli):
    cdir, _ = measured
    outside = tmp_path / "outside"
    outside.mkdir()
    descriptor = outside / "cluster.yaml"
    descriptor.write_text(VICTIM)
    out = tmp_path / "cal.yaml"
    out.write_text(VICTIM)  # an unrelated file at --out
    code, _, err = run_cli("calibrate", cdir.root, "--out", out, "--fit", FIT)
    one_line(code, err, str(out), "--force")
    assert out.read_text() == VICTIM
    out.unlink()
    out.symlink_to(descriptor)  # a link to the user's descriptor
    code, _, err = run_cli("calibrate", cdir.root, "--out", out, "--fit", FIT)
    one_line(code, err, "--force")
    code, _, err = run_cli("calibrate", cdir.root, "--out", out, "--fit", FIT, "--force")
    assert code == 0, err
    assert not out.is_symlink() and "sporch_calibration" in out.read_text() and descriptor.read_text() == VICTIM
    # the default file in the campaign folder is sporch's own: written, then replaced
    for _ in range(2):
        code, _, err = run_cli("calibrate", cdir.root, "--fit", FIT)
        assert code == 0 and (cdir.root / "calibration.yaml").is_file(), err


def test_a_point_plan_that_is_not_a_plan_is_one_line(measured, run_cli):
    cdir, ids = measured
    plan = cdir.plan_file(ids[0])
    good = plan.read_text()
    for bad in ('{"x": 1}', good[: len(good) // 2], "[]", '{"cluster": 1, "job": "x"}', "\xff"):
        plan.write_bytes(bad.encode("latin-1"))
        code, _, err = run_cli("calibrate", cdir.root, "--fit", FIT)
        one_line(code, err, str(plan))
    plan.unlink()
    code, _, err = run_cli("calibrate", cdir.root, "--fit", FIT)
    one_line(code, err, str(plan), "missing")
    os.mkfifo(plan)
    feeder = threading.Thread(target=lambda: os.close(os.open(plan, os.O_WRONLY)), daemon=True)
    feeder.start()  # a reader that would block gets an empty file instead; the message says FIFO
    code, _, err = run_cli("calibrate", cdir.root, "--fit", FIT)
    one_line(code, err, str(plan), "not a regular file")
    if feeder.is_alive():
        fd = os.open(plan, os.O_RDONLY | os.O_NONBLOCK)
        feeder.join(5)
        os.close(fd)
