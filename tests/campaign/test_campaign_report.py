"""Campaign report and compare on synthetic result files (the aggregation, plots' data, exit codes)."""

from __future__ import annotations

import csv
import json
import struct
from pathlib import Path

import pytest

from sporch.orchestrator.campaign.collect import collect
from sporch.orchestrator.campaign.report import plot_data
from sporch.orchestrator.campaign.compare import parse_threshold
from sporch.orchestrator.errors import SporchError

REFS = """
name: synth
base: {model: {preset: tiny}, workload: {seq_len: 64}}
matrix: {clusters: [local]}
references:
  - cluster: local
    where: {gpus: 4}
    metrics:
      step_ms_median: [40.0, -0.5, 0.1, ms]
"""

# (id, gpus, layout, repeat, step median ms, comm ms)
POINTS = [
    ("p2a", 2, "1x1x1x2", 0, 100.0, 10.0),
    ("p2b", 2, "1x1x2x1", 0, 120.0, 30.0),
    ("p4a", 4, "1x1x2x2", 0, 60.0, 12.0),
    ("p4a1", 4, "1x1x2x2", 1, 64.0, 14.0),
    ("p4b", 4, "1x1x4x1", 0, 80.0, 35.0),
]


def make_campaign(root: Path, points=POINTS, scale: float = 1.0, refs: str = REFS) -> Path:
    (root / "points").mkdir(parents=True, exist_ok=True)
    (root / "campaign.yaml").write_text(refs)
    for pid, gpus, layout, rep, step, comm in points:
        d = root / "points" / pid
        d.mkdir(parents=True, exist_ok=True)
        values = {"cluster": "local", "nodes": gpus // 2, "gpus": gpus, "layout": layout, "preset": "tiny",
                  "shape": "9x64x64", "dtype": "float32", "repeat": rep}
        (d / "point.json").write_text(json.dumps({"id": pid, "params": {}, "values": values, "group": "g"}))
        metrics = {"step_ms_median": step * scale, "step_ms_p90": step * scale * 1.1, "step_ms_min": step * 0.9,
                   "tokens_per_s": 48 / (step * scale / 1e3), "comm_ms_per_step": comm,
                   "peak_memory_bytes": 3 * 2**30, "tflops_per_gpu": 0.001 / scale, "peak_fraction": 0.005 / scale,
                   "comm_bytes_per_step": 1000 * gpus, "ideal_ms_per_step": 0.05}
        (d / "result.json").write_text(json.dumps({"status": "completed", "metrics": metrics}))
    return root


def test_rows_hold_the_result_files_numbers(tmp_path):
    root = make_campaign(tmp_path / "c")
    pending = root / "points" / "zz"
    pending.mkdir()
    (pending / "point.json").write_text(json.dumps({"id": "zz", "values": {
        "cluster": "local", "nodes": 1, "gpus": 2, "layout": "1x1x1x2", "preset": "tiny", "shape": "9x64x64",
        "dtype": "float32", "repeat": 5}}))
    rows = {r.id: r for r in collect(root)}
    assert rows["zz"].status == "pending" and not rows["zz"].metrics
    for pid, *_ in POINTS:
        result = json.loads((root / "points" / pid / "result.json").read_text())["metrics"]
        assert rows[pid].metrics["step_ms_median"] == result["step_ms_median"]
        assert rows[pid].metrics["peak_memory_gib"] == result["peak_memory_bytes"] / 2**30
    # reference: gpus 4 only, 40 ms -50%/+10% -> [20, 44]: every 4-GPU point fails, 2-GPU ones have none
    assert {pid: rows[pid].verdict for pid in rows} == {
        "p2a": "none", "p2b": "none", "p4a": "fail", "p4a1": "fail", "p4b": "fail", "zz": "none"}


def test_plot_series(tmp_path):
    data = plot_data(collect(make_campaign(tmp_path / "c")))
    lat = data["latency_vs_gpus"]["series"]
    # families: ulysses fixed, ring grows; repeats combined by their median (60, 64 -> 62)
    assert lat == {
        "ulysses1": {"x": [2, 4], "y": [120.0, 80.0], "layout": ["1x1x2x1", "1x1x4x1"]},
        "ulysses2": {"x": [2, 4], "y": [100.0, 62.0], "layout": ["1x1x1x2", "1x1x2x2"]},
    }
    (best,) = data["best_layout"]["series"].values()
    assert best == {"x": [2, 4], "y": [100.0, 62.0], "layout": ["1x1x1x2", "1x1x2x2"]}
    (eff,) = data["scaling_efficiency"]["series"].values()
    assert eff["y"] == pytest.approx([1.0, 100.0 * 2 / (62.0 * 4)])
    cvc = data["comm_vs_compute"]
    assert cvc["labels"][0] == "2 GPUs 1x1x1x2" and cvc["comm_ms"][0] == 10.0 and cvc["compute_ms"][0] == 90.0
    assert len(cvc["labels"]) == 4


def test_plot_labels_name_only_what_differs_between_workloads(tmp_path):
    """Two shapes on one cluster (given as a file): series and bars are told apart by the
    shape alone, not by the cluster's path, preset and dtype they share."""
    root = make_campaign(tmp_path / "c")
    for d in (root / "points").iterdir():
        point = json.loads((d / "point.json").read_text())
        point["values"]["cluster"] = str(tmp_path / "clusters" / "lab-1gpu.yaml")
        if d.name.startswith("p4"):
            point["values"]["shape"] = "seq2048"
        (d / "point.json").write_text(json.dumps(point))
    data = plot_data(collect(root))
    assert sorted(data["best_layout"]["series"]) == ["9x64x64", "seq2048"]
    assert "9x64x64 | ulysses2" in data["latency_vs_gpus"]["series"]
    assert data["comm_vs_compute"]["labels"][0] == "9x64x64 2 GPUs 1x1x1x2"
    assert not any(str(tmp_path) in label or "float32" in label for label in data["comm_vs_compute"]["labels"])
    one = plot_data(collect(make_campaign(tmp_path / "one")))  # one workload: named in full
    assert list(one["best_layout"]["series"]) == ["local tiny 9x64x64 float32"]


def test_report_command_writes_csv_plots_html_and_gates_on_references(tmp_path, run_cli):
    root = make_campaign(tmp_path / "c")
    code, out, err = run_cli("campaign", "report", root)
    assert code == 1, err  # 4-GPU points miss the reference
    assert "reference failed p4a" in out
    report = root / "report"
    with open(report / "table.csv") as fh:
        table = list(csv.DictReader(fh))
    assert [r["id"] for r in table] == ["p2a", "p2b", "p4a", "p4a1", "p4b"]
    assert float(table[2]["step_ms_median"]) == 60.0 and table[2]["reference"] == "fail"
    for name in ("latency_vs_gpus", "scaling_efficiency", "comm_vs_compute", "best_layout"):
        png = (report / f"{name}.png").read_bytes()
        assert png[:8] == b"\x89PNG\r\n\x1a\n"
        width, height = struct.unpack(">II", png[16:24])
        assert width == 800 and height == 450
    assert json.loads((report / "plots.json").read_text()) == plot_data(collect(root))
    html = (report / "report.html").read_text()
    assert html.count("data:image/png;base64,") == 4 and 'class="fail"' in html
    # a passing reference: exit 0
    ok = make_campaign(tmp_path / "ok", refs=REFS.replace("[40.0, -0.5, 0.1, ms]", "[70.0, -0.2, 0.2, ms]"))
    code, out, err = run_cli("campaign", "report", ok, "--out", tmp_path / "okreport")
    assert code == 0, out + err
    assert (tmp_path / "okreport" / "report.html").is_file()


def test_report_of_an_empty_dir_is_bad_input(tmp_path, run_cli):
    code, _, err = run_cli("campaign", "report", tmp_path)
    assert code == 2 and "has no campaign points" in err
    code, _, err = run_cli("campaign", "report", tmp_path / "nope")
    assert code == 2 and "not found" in err


def test_compare_flags_regressions_only_beyond_the_threshold(tmp_path, run_cli):
    a = make_campaign(tmp_path / "a")
    b = make_campaign(tmp_path / "b", scale=1.04)
    code, out, _ = run_cli("campaign", "compare", a, b, "--threshold", "5%")
    assert code == 0 and "no regression over 5.0% in 5 point(s)" in out
    c = make_campaign(tmp_path / "c", scale=1.2)
    code, out, _ = run_cli("campaign", "compare", a, c, "--threshold", "0.05")
    assert code == 1
    assert "step_ms_median" in out and "tokens_per_s" in out and "+20.0%" in out
    code, out, _ = run_cli("campaign", "compare", c, a)  # faster is not a regression
    assert code == 0


@pytest.mark.parametrize("text, value", [("5%", 0.05), ("0.1", 0.1), (" 12.5% ", 0.125)])
def test_threshold_parsing(text, value):
    assert parse_threshold(text) == pytest.approx(value)


def test_bad_threshold():
    with pytest.raises(SporchError, match="not a number or a percentage"):
        parse_threshold("five")
