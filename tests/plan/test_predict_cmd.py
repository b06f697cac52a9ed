"""``sporch predict``: the published tables against the cost model, numbers from the model's own
functions (not printed and eyeballed)."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from sporch.orchestrator.cli import predict_cmd
from sporch.orchestrator.plan import published
from sporch.orchestrator.plan.calibration import fit, predicted_s
from sporch.orchestrator.plan.cost_constants import default_constants
from sporch.orchestrator.plan.published_report import PUBLISHED_FIT
from tests.testutil import ROOT


def _predict(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "sporch.orchestrator.cli.main", "predict", *args],
                          capture_output=True, text=True, cwd=ROOT)


def test_every_published_case_is_reported_with_its_errors():
    proc = _predict("--json")
    assert proc.returncode == 0, proc.stderr
    report = {c["name"]: c for c in json.loads(proc.stdout)}
    assert sorted(report) == sorted(c["name"] for c in published.cases())
    for name, case in report.items():
        c = published.case(name)
        obs = published.observations(c)
        base = default_constants(c["gpu"]["model"])
        fitted = fit(obs, base, PUBLISHED_FIT)
        assert [r["layout"] for r in case["rows"]] == [o.label for o in obs]
        for r, o, after in zip(case["rows"], obs, fitted.predictions):
            assert r["measured_s"] == o.measured_s
            assert r["predicted_s"] == pytest.approx(predicted_s(o, base))
            assert r["error"] == pytest.approx(r["predicted_s"] / o.measured_s - 1)
            assert r["fitted_s"] == pytest.approx(after)
        assert case["checked"] == c.get("checked", True)


def test_the_wan_h800_table_as_docs_plan_says():
    (case,) = json.loads(_predict("wan21-t2v-14b-720p-h800", "--json").stdout)
    assert [round(r["predicted_s"]) for r in case["rows"]] == [1092, 596, 337, 204]
    assert max(abs(r["fitted_error"]) for r in case["rows"]) < 0.035
    text = _predict("wan21-t2v-14b-720p-h800").stdout
    assert "1x1x1x8" in text and "-29%" in text


def test_validate_prints_the_held_out_table(held_out, run_cli, monkeypatch):
    proc = _predict("--validate", "--json")
    assert proc.returncode == 0, proc.stderr
    rows = {r["name"]: r for r in json.loads(proc.stdout)}
    assert sorted(rows) == sorted(c["name"] for c in published.checked_cases())
    assert rows["wan21-t2v-14b-720p-h20"]["ordered"] == rows["wan21-t2v-14b-720p-h20"]["pairs"] == 6
    for name, s in held_out.items():  # the command's figures are the validation's (tests/plan/conftest.py)
        assert {k: v for k, v in rows[name].items() if k != "defaults"} == json.loads(json.dumps(s.to_dict()))
    # the table as text, from the same figures (the fit is not made a third time)
    monkeypatch.setattr(predict_cmd, "leave_one_table_out", lambda: list(held_out.values()))
    code, out, _ = run_cli("predict", "--validate")
    assert code == 0 and "leave one table out" in out
    worst = max(held_out.values(), key=lambda s: s.max_ratio_error)
    assert f"largest held-out ratio error {worst.max_ratio_error:.1%} ({worst.name})" in " ".join(out.split())


def test_an_unknown_case_is_one_line():
    proc = _predict("no-such-case")
    assert proc.returncode == 2 and proc.stderr.count("\n") == 1 and "unknown published case" in proc.stderr
