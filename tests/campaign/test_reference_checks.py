"""Issue 35 item 5: a reference cannot pass without a measurement. A bound with neither a lower nor
an upper limit is refused; a reference that applies to no point of the campaign is refused before
anything runs; a point that ran and did not complete fails its references (it was shown as "no
reference", so a reproduction whose runs broke showed no failure); a point not run yet is "not
run yet", never passed. The report lists every check with the measured / reference ratio."""

from __future__ import annotations

import json

import pytest

from sporch.orchestrator.campaign.collect import collect
from sporch.orchestrator.campaign.expand import expand
from sporch.orchestrator.campaign.folder import prepare
from sporch.orchestrator.campaign.reference_checks import checks, counts
from sporch.orchestrator.campaign.spec import campaign_from_dict

CAMPAIGN = {
    "name": "refs",
    "base": {"model": {"preset": "tiny"},
             "workload": {"kind": "benchmark", "frames": 5, "height": 32, "width": 32, "guidance_scale": 1.0,
                          "dtype": "float32", "warmup": 1, "repeat": 2}},
    "matrix": {"clusters": ["local"], "layouts": [{"ulysses": 4}, {"ring": 4}, {"ring": 2, "ulysses": 2}]},
    "references": [
        {"where": {"layout": "1x1x1x4"}, "metrics": {"step_ms_median": [10.0, -0.25, 0.25, "ms"]}},
        {"where": {"layout": "1x1x4x1"}, "metrics": {"step_ms_median": [10.0, -0.25, 0.25, "ms"]}},
        {"where": {"layout": "1x1x2x2"}, "metrics": {"step_ms_median": [10.0, -0.25, 0.25, "ms"]}},
    ],
}


def _write(tmp_path, doc) -> str:
    path = tmp_path / "c.yaml"
    path.write_text(json.dumps({**doc, "output_dir": str(tmp_path)}))
    return str(path)


def _refused(run_cli, *args, words=()):
    code, _, err = run_cli(*args)
    assert code == 2 and len(err.strip().splitlines()) == 1 and "Traceback" not in err, err
    for w in words:
        assert w in err, err


def test_a_reference_that_cannot_fail_is_refused(tmp_path, run_cli):
    open_ended = {**CAMPAIGN, "references": [{"metrics": {"step_ms_median": [10.0, None, None, "ms"]}}]}
    _refused(run_cli, "campaign", "plan", _write(tmp_path, open_ended),
             words=("references[0].metrics.step_ms_median' has neither a lower nor an upper bound",))
    nowhere = {**CAMPAIGN, "references": [*CAMPAIGN["references"],
                                          {"where": {"layout": "1x1x1x8"}, "metrics": {"step_ms_median": [1, -0.1, 0.1, "ms"]}}]}
    _refused(run_cli, "campaign", "plan", _write(tmp_path, nowhere),
             words=("references[3] (layout=1x1x1x8 on cluster *) applies to no point of the campaign",
                    "layout: 1x1x1x4, 1x1x2x2, 1x1x4x1"))
    other = {**CAMPAIGN, "references": [{"cluster": "h100*", "metrics": {"step_ms_median": [1, -0.1, 0.1, "ms"]}}]}
    _refused(run_cli, "campaign", "plan", _write(tmp_path, other), words=("on cluster h100*) applies to no point",))
    code, _, err = run_cli("campaign", "plan", _write(tmp_path, CAMPAIGN))
    assert code == 0, err


def test_a_point_that_broke_fails_its_reference_and_one_not_run_is_not_passed(tmp_path):
    exp = expand(campaign_from_dict(CAMPAIGN))
    cdir = prepare(exp, tmp_path / "refs")
    by_layout = {p.match_values()["layout"]: p.id for p in exp.points}
    cdir.result_file(by_layout["1x1x1x4"]).write_text(json.dumps({"status": "completed",
                                                                  "metrics": {"step_ms_median": 12.0}}))
    cdir.result_file(by_layout["1x1x4x1"]).write_text(json.dumps({"status": "failed", "error": "rank 2 died",
                                                                  "metrics": {"step_ms_median": 10.0}}))
    rows = {r.values["layout"]: r for r in collect(cdir.root, references=exp.campaign.references)}
    assert rows["1x1x1x4"].verdict == "pass"
    # it "measured" 10 ms, the reference exactly, but the run failed: no reproduction
    assert rows["1x1x4x1"].verdict == "fail"
    assert rows["1x1x2x2"].status == "pending" and rows["1x1x2x2"].verdict == "none"
    found = {c.layout: c for c in checks(list(rows.values()))}
    assert counts(list(found.values())) == {"pass": 1, "fail": 1, "pending": 1}
    assert found["1x1x1x4"].ratio == pytest.approx(1.2, rel=1e-12) and found["1x1x1x4"].why == "within the band"
    assert found["1x1x4x1"].measured is None and found["1x1x4x1"].why == "no measurement (the point failed)"
    assert found["1x1x2x2"].verdict == "pending" and found["1x1x2x2"].why == "not run yet"


def test_the_terminal_report_at_80_columns_keeps_whole_ids(tmp_path, run_cli, monkeypatch):
    """Real point ids (12 characters): when every point has one status it goes to the title, and
    the points table and the references table fit 80 columns with nothing cut."""
    monkeypatch.setenv("COLUMNS", "80")
    exp = expand(campaign_from_dict({**CAMPAIGN, "output_dir": str(tmp_path)}))
    cdir = prepare(exp, tmp_path / "refs")
    (cdir.root / "campaign.yaml").write_text(json.dumps(CAMPAIGN))
    for i, p in enumerate(exp.points):
        cdir.result_file(p.id).write_text(json.dumps({"status": "completed", "metrics": {"step_ms_median": 8.0 + 3 * i}}))
    code, out, err = run_cli("campaign", "report", cdir.root, "--out", tmp_path / "report")
    assert code == 1, err  # 14 ms misses 10 ms +/- 25%
    table = [line for line in out.splitlines() if line[:1] in "┏┃┡│└"]
    assert "…" not in out and max(len(line) for line in table) <= 80, out
    assert all(any(p.id in line for line in table) for p in exp.points)
    assert "status completed" in out and "references (step_ms_median): 2 passed, 1 failed" in out
    ratios = {line.split("│")[1].strip(): line.split("│")[-3].strip() for line in table
              if " ms " in line and line.startswith("│")}
    assert ratios == {p.id: f"{(8.0 + 3 * i) / 10:.3g}x" for i, p in enumerate(exp.points)}, table
