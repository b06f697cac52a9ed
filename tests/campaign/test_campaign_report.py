"""Campaign report and compare on synthetic result files (the aggregation, plots' data, exit codes)."""

from __future__ import annotations

import csv
import json
import re
import struct
from pathlib import Path

import pytest

from sporch.orchestrator.campaign.collect import KEY_COLUMNS, collect, columns, format_value
from sporch.orchestrator.campaign.metrics import STAGE_METRICS, STEP_METRICS
from sporch.orchestrator.campaign.report import build_report
from sporch.orchestrator.campaign.report_plot_data import plot_data
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
    assert html.count("data:image/png;base64,") == 4 and re.search(r'<td data-value="[^"]*" class="g-\w+ fail"', html)
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
    assert code == 0 and "no regression over 5.0% in 5 points" in out
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


# -- generate points: per-stage figures (result.json metrics.stages, rank 0's) -----------------------
GIB = 2**30
STEPS = 4
#: (id, gpus, layout, stages): g2 denoised everything; g4r reused every latent (no encode, load, denoise).
GENERATE = [
    ("g2", 2, "1x1x1x2", {
        "startup": {"s": 21.5},  # the runtime's start-up (no memory figure)
        "encode": {"s": 1.234567, "peak_memory_bytes": 3 * GIB + 12345},
        "load": {"s": 2.5, "peak_memory_bytes": 9 * GIB},
        "denoise": {"s": 10.2, "peak_memory_bytes": 11 * GIB + 1, "steps": STEPS, "s_per_step": 2.55},
        "decode": {"s": 3.75, "peak_memory_bytes": 14 * GIB + 7},
        "save": {"s": 0.012345, "peak_memory_bytes": 14 * GIB + 7}}),
    ("g4r", 4, "1x1x2x2", {
        "decode": {"s": 4.5, "peak_memory_bytes": 13 * GIB},
        "save": {"s": 0.02, "peak_memory_bytes": 13 * GIB}}),
]
GENERATE_REFS = REFS.replace("    where: {gpus: 4}\n", "").replace("step_ms_median: [40.0, -0.5, 0.1, ms]",
                                                                  "stage_decode_s: [4.0, null, 0.1, s]")


def make_generate_campaign(root: Path, points=GENERATE, refs: str = GENERATE_REFS) -> Path:
    """A campaign of generate points whose result.json carries rank 0's ``stages``."""
    (root / "points").mkdir(parents=True, exist_ok=True)
    (root / "campaign.yaml").write_text(refs)
    for pid, gpus, layout, stages in points:
        d = root / "points" / pid
        d.mkdir(parents=True, exist_ok=True)
        values = {"cluster": "local", "nodes": 1, "gpus": gpus, "layout": layout, "preset": "tiny",
                  "shape": "9x64x64", "dtype": "float32", "repeat": 0}
        (d / "point.json").write_text(json.dumps({"id": pid, "params": {}, "values": values, "group": "g"}))
        metrics = {"kind": "generate", "prompts": 1, "steps": STEPS, "step_ms": [2550.0] * STEPS,
                   "peak_memory_bytes": 14 * GIB + 7, "stages": stages}
        (d / "result.json").write_text(json.dumps({"status": "completed", "workload": "generate",
                                                   "metrics": metrics}))
    return root


def expected_stage_metrics(stages: dict) -> dict:
    """The stage metrics a point's ``stages`` should give, computed from the record itself."""
    out = {}
    for stage, rec in stages.items():
        out[f"stage_{stage}_s"] = rec["s"]
        if "peak_memory_bytes" in rec:
            out[f"stage_{stage}_peak_memory_gib"] = rec["peak_memory_bytes"] / GIB
        if "s_per_step" in rec:
            out[f"stage_{stage}_s_per_step"] = rec["s_per_step"]
    return out


def test_generate_rows_hold_each_stages_seconds_and_peak_memory(tmp_path):
    rows = {r.id: r for r in collect(make_generate_campaign(tmp_path / "g"))}
    for pid, _, _, stages in GENERATE:
        want = expected_stage_metrics(stages)
        got = {m.name: rows[pid].metrics[m.name] for m in STAGE_METRICS}
        assert got == {m.name: want.get(m.name) for m in STAGE_METRICS}, pid  # an absent stage is None
    assert rows["g2"].metrics["peak_memory_gib"] == (14 * GIB + 7) / GIB
    # reference on decode: 4.0 s, at most +10% -> g2 (3.75 s) passes, g4r (4.5 s) fails
    assert rows["g2"].verdicts["stage_decode_s"] == "pass" and rows["g4r"].verdicts["stage_decode_s"] == "fail"
    assert rows["g2"].verdict == "pass" and rows["g4r"].verdict == "fail"


def test_report_of_generate_points_shows_the_stage_columns_exactly(tmp_path, run_cli, monkeypatch):
    monkeypatch.setenv("COLUMNS", "400")  # the terminal table on one line per row
    root = make_generate_campaign(tmp_path / "g")
    code, out, err = run_cli("campaign", "report", root, "--wide")
    assert code == 1, err  # g4r's decode misses its reference
    assert "reference failed g4r" in out and "stage_decode_s = 4.5" in out
    with open(root / "report" / "table.csv") as fh:
        header, *table = list(csv.reader(fh))
    stage_cols = [c for c in header if c.startswith("stage_")]
    assert stage_cols == [m.name for m in STAGE_METRICS]  # some point has each of them, in stage order
    assert header == list(KEY_COLUMNS) + [m.name for m in STEP_METRICS] + stage_cols + ["reference"]
    by_id = {line[0]: dict(zip(header, line)) for line in table}
    html = (root / "report" / "report.html").read_text()
    for pid, _, _, stages in GENERATE:
        want = expected_stage_metrics(stages)
        for col in stage_cols:
            assert by_id[pid][col] == format_value(want.get(col)), (pid, col)  # exact: repr of the float
        for col, value in want.items():
            assert f'data-value="{format_value(value)}"' in html
    # the terminal: short stage headers, no step-time columns (no point has one), no load columns
    header = next(line for line in out.splitlines() if " id " in line)
    assert [h in header for h in ("encode s", "denoise s per step", "decode GiB", "save s", "step ms median",
                                  "load s")] == [True] * 4 + [False] * 2


def test_a_stage_no_point_ran_has_no_column_unless_a_reference_wants_it(tmp_path):
    """Only reused latents everywhere: no encode, load or denoise columns; a reference on
    encode brings its column back, as a failing cell (measurement missing)."""
    rows = collect(make_generate_campaign(tmp_path / "g", points=GENERATE[1:]))
    decode_save = ["stage_decode_s", "stage_decode_peak_memory_gib", "stage_save_s", "stage_save_peak_memory_gib"]
    assert [c for c in columns(rows) if c.startswith("stage_")] == decode_save
    refs = GENERATE_REFS.replace("stage_decode_s: [4.0, null, 0.1, s]", "stage_encode_s: [1.0, null, 0.1, s]")
    (row,) = collect(make_generate_campaign(tmp_path / "r", points=GENERATE[1:], refs=refs))
    assert [c for c in columns([row]) if c.startswith("stage_")] == ["stage_encode_s"] + decode_save
    assert row.metrics["stage_encode_s"] is None and row.verdicts["stage_encode_s"] == "fail"


def test_a_benchmark_campaign_gets_no_stage_column(tmp_path, run_cli):
    root = make_campaign(tmp_path / "c")
    _, out, _ = run_cli("campaign", "report", root)
    with open(root / "report" / "table.csv") as fh:
        header = next(csv.reader(fh))
    assert header == list(KEY_COLUMNS) + [m.name for m in STEP_METRICS] + ["reference"]
    assert "stage_" not in (root / "report" / "report.html").read_text()
    assert not any(stage in out for stage in ("encode", "denoise", "decode", "save "))


@pytest.mark.parametrize("stages", [[1, 2], "fast", {"decode": [3.0]},
                                    {"decode": {"s": "3", "peak_memory_bytes": True}},
                                    {"decode": {"s": None, "peak_memory_bytes": {"x": 1}}}])
def test_stage_records_that_are_not_numbers_are_blank(tmp_path, run_cli, stages):
    root = make_generate_campaign(tmp_path / "g", points=[("g2", 2, "1x1x1x2", stages)], refs=REFS)
    (row,) = collect(root)
    assert row.ok and all(row.metrics[m.name] is None for m in STAGE_METRICS)
    code, out, err = run_cli("campaign", "report", root)
    assert code == 0 and err == "" and "Traceback" not in out


def test_compare_flags_a_slower_stage(tmp_path, run_cli):
    a = make_generate_campaign(tmp_path / "a", refs=REFS)
    slower = [(pid, g, lay, {**st, "decode": {**st["decode"], "s": st["decode"]["s"] * 1.2}})
              for pid, g, lay, st in GENERATE]
    b = make_generate_campaign(tmp_path / "b", points=slower, refs=REFS)
    code, out, _ = run_cli("campaign", "compare", a, b, "--threshold", "5%")
    assert code == 1 and "stage_decode_s" in out and "+20.0%" in out and "stage_save_s" not in out


# -- report polish (issue 20 item 5): predicted vs measured, stage bars, integer GPU ticks -----------

def test_predicted_vs_measured_and_stage_bars_only_when_the_points_have_them(tmp_path, run_cli):
    root = make_campaign(tmp_path / "c")
    assert "predicted_vs_measured" not in plot_data(collect(root))  # no prediction in these results
    for d in (root / "points").iterdir():
        res = json.loads((d / "result.json").read_text())
        res["metrics"]["predicted_ms_per_step"] = res["metrics"]["step_ms_median"] * 1.5
        (d / "result.json").write_text(json.dumps(res))
    rows = collect(root)
    pvm = plot_data(rows)["predicted_vs_measured"]
    done = [r for r in rows if r.ok]
    assert pvm["measured_ms"] == [r.metrics["step_ms_median"] for r in done]
    assert pvm["predicted_ms"] == pytest.approx([1.5 * m for m in pvm["measured_ms"]])
    assert "ms" in pvm["xlabel"] and "ms" in pvm["ylabel"]
    assert "stage_seconds" not in plot_data(rows)
    code, _, err = run_cli("campaign", "report", root)
    assert (root / "report" / "predicted_vs_measured.png").read_bytes()[:4] == b"\x89PNG"
    html = (root / "report" / "report.html").read_text()
    assert 'id="plot-predicted_vs_measured"' in html and '<div class="table-scroll">' in html

    gen = collect(make_generate_campaign(tmp_path / "g"))
    bars = plot_data(gen)["stage_seconds"]
    for i, (pid, _, _, stages) in enumerate(GENERATE):
        for stage, values in bars["stages"].items():
            want = stages.get(stage, {}).get("s") if isinstance(stages.get(stage), dict) else None
            assert values[i] == (want if want is not None else 0.0), (pid, stage)
    assert bars["ylabel"] == "seconds"


def test_gpu_axes_have_a_tick_at_each_gpu_count(tmp_path):
    from sporch.orchestrator.campaign.report_plot_images import gpu_ticks

    data = plot_data(collect(make_campaign(tmp_path / "c")))
    for name in ("latency_vs_gpus", "scaling_efficiency", "best_layout"):
        assert gpu_ticks(data[name]) == [2, 4], name


def test_points_that_repeat_a_published_run_show_the_published_seconds(tmp_path, run_cli):
    """A point whose plan is a run of a published table (here xDiT's Flux.1-dev eager U2R2 on
    H100) gets a row with the published seconds, the predicted generation and its error, and its
    own steps x median step; a point of no published run gets none."""
    from sporch.orchestrator.contract.plan import Layout
    from sporch.orchestrator.plan import published

    root = make_campaign(tmp_path / "c", points=POINTS[:2], refs=REFS.split("references:")[0])
    case = published.case("flux-dev-1024-h100-eager")
    plan = published.plan_case(case, Layout(1, 1, 2, 2))
    (root / "points" / "p2a" / "plan.json").write_text(plan.to_json())
    other = published.plan_case(case, Layout(1, 1, 2, 4))  # no published run of this layout
    (root / "points" / "p2b" / "plan.json").write_text(other.to_json())
    code, out, err = run_cli("campaign", "report", root)
    assert code == 0, out + err
    assert "published measurements" in out and "flux-dev-1024-h100-eager" in out
    predicted = plan.estimates.predicted.generation_s  # one generation, as the table times it (not startup, load)
    assert predicted < plan.estimates.predicted.job_s
    html = (root / "report" / "report.html").read_text().split('id="published-points"')[1].split("</table>")[0]
    assert '<tr data-id="p2a">' in html and '<tr data-id="p2b">' not in html
    assert 'data-value="5.19"' in html and f'data-value="{predicted}"' in html
    assert f"{predicted / 5.19 - 1:+.1%}" in html
    assert f'data-value="{100.0 * 28 / 1e3}"' in html  # 28 steps x the 100 ms median step


@pytest.mark.parametrize("columns", [80, 120])
def test_the_terminal_report_fits_80_and_120_columns(tmp_path, run_cli, monkeypatch, columns):
    """Issue 35: the default table fits (no cell cut to "..."); --wide has every column."""
    monkeypatch.setenv("COLUMNS", str(columns))
    root = make_campaign(tmp_path / "c")
    code, out, _ = run_cli("campaign", "report", root)
    assert code == 1  # the 4-GPU points miss their reference
    table = [line for line in out.splitlines() if line[:1] in "┏┃┡│└"]
    assert max(len(line) for line in table) <= columns and "…" not in "\n".join(table)
    header = next(line for line in table if " id " in line)
    assert all(h in header for h in ("step ms", "GiB", "ref")) and "tflops" not in header
    points = table[:next(i for i, line in enumerate(table) if line.startswith("└")) + 1]  # then the references'
    assert sum("fail" in line for line in points) == 3 and any("p4a1" in line for line in points)
    monkeypatch.setenv("COLUMNS", "400")
    code, out, _ = run_cli("campaign", "report", root, "--wide")
    assert "tflops per gpu" in out and "step ms p90" not in out  # p90: table.csv and the page


def _fingerprint_runs(root: Path, fingerprints: dict) -> None:
    """Give the points' result.json a fingerprint (schema 2)."""
    for pid, fp in fingerprints.items():
        path = root / "points" / pid / "result.json"
        result = json.loads(path.read_text())
        path.write_text(json.dumps({**result, "schema_version": 2, "fingerprint": fp}))


def test_compare_names_the_fingerprint_field_that_changed(tmp_path, run_cli, monkeypatch):
    """Issue 35: a baseline and a current run differing in one fingerprint field (NCCL); the
    slower point's line names it. A run without a fingerprint (schema 1) says nothing."""
    monkeypatch.setenv("COLUMNS", "200")
    fp = {"sporch": "0.1.0", "torch": "2.5.1", "cuda": "12.4", "nccl": "2.21.5", "gpu_model": "H100",
          "gpu_count": 4, "env": {"NCCL_IB_DISABLE": "0"}, "attention_kernel": "cudnn", "compiled": True}
    a = make_campaign(tmp_path / "a")
    b = make_campaign(tmp_path / "b", scale=1.2)
    _fingerprint_runs(a, {pid: fp for pid, *_ in POINTS})
    _fingerprint_runs(b, {pid: {**fp, "nccl": "2.23.4"} for pid, *_ in POINTS if pid != "p2b"})
    code, out, _ = run_cli("campaign", "compare", a, b, "--threshold", "5%")
    assert code == 1
    lines = [line for line in out.splitlines() if line.startswith("changed:")]
    assert "changed: p2a (1x1x1x2): NCCL 2.21.5 -> 2.23.4" in lines
    assert len(lines) == 4 and not any("p2b" in line for line in lines)  # p2b's B run has no fingerprint
    _fingerprint_runs(b, {"p4b": fp})
    _, out, _ = run_cli("campaign", "compare", a, b, "--threshold", "5%")
    assert "changed: p4b (1x1x4x1): nothing in the fingerprint" in out


def test_compare_names_every_version_that_moves_a_figure(tmp_path, run_cli, monkeypatch):
    """Issue 49: Python, transformers, torchao and the attention kernel's own package are in the
    fingerprint a run records (benchstats.fingerprint) and `campaign compare` names each that changed."""
    from sporch.orchestrator.benchstats import fingerprint, kernel_package_version

    import importlib.metadata
    import platform

    def installed(name):
        try:
            return importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            return None

    mine = fingerprint(attention_kernel="cudnn")
    assert mine.python == platform.python_version() and mine.transformers == installed("transformers")
    assert mine.torchao == installed("torchao")  # None without the quant extra
    assert mine.attention_kernel_version is None and kernel_package_version("cudnn") is None  # torch's kernel
    monkeypatch.setenv("COLUMNS", "200")
    fp = {"sporch": "0.1.0", "torch": "2.5.1", "python": "3.11.7", "transformers": "4.57.1", "torchao": "0.13.0",
          "attention_kernel": "flash_attn", "attention_kernel_version": "flash_attn 2.7.4", "gpu_model": "H100"}
    a = make_campaign(tmp_path / "a")
    b = make_campaign(tmp_path / "b", scale=1.2)
    _fingerprint_runs(a, {pid: fp for pid, *_ in POINTS})
    _fingerprint_runs(b, {pid: {**fp, "python": "3.12.3", "transformers": "5.0.0", "torchao": "0.14.1",
                                "attention_kernel_version": "flash_attn 2.8.3"} for pid, *_ in POINTS})
    code, out, _ = run_cli("campaign", "compare", a, b, "--threshold", "5%")
    assert code == 1
    line = next(line for line in out.splitlines() if line.startswith("changed: p2a"))
    assert line == ("changed: p2a (1x1x1x2): Python 3.11.7 -> 3.12.3; transformers 4.57.1 -> 5.0.0; torchao "
                    "0.13.0 -> 0.14.1; attention kernel package flash_attn 2.7.4 -> flash_attn 2.8.3")


def test_summary_per_gpu_count_and_fingerprint(tmp_path):
    """The page's opening summary (campaign/summary.py): per GPU count the fastest layout (repeats
    by their median), its speed-up over the planner's default layout and over the 1-GPU point,
    the verdicts; the fingerprint's common fields and the one that differs."""
    from sporch.orchestrator.campaign import summary

    root = make_campaign(tmp_path / "c", points=POINTS + [("p1", 1, "1x1x1x1", 0, 300.0, 0.0),
                                                          ("p4c", 4, "1x2x1x2", 0, 50.0, 5.0)])
    for d in (root / "points").iterdir():
        point = json.loads((d / "point.json").read_text())
        point["values"]["nodes"] = max(point["values"]["gpus"] // 2, 1)
        (d / "point.json").write_text(json.dumps(point))
        result = json.loads((d / "result.json").read_text())
        result["fingerprint"] = {"torch": "2.13.0", "nccl": "2.23.4" if d.name == "p4b" else "2.21.5",
                                 "gpu_count": point["values"]["gpus"]}
        (d / "result.json").write_text(json.dumps(result))
    rows = collect(root)
    got = {s.gpus: s for s in summary.sizes(rows)}
    assert sorted(got) == [1, 2, 4]
    # 4 GPUs on 2 nodes: default 1x1x2x2 (median of 60 and 64 = 62); fastest 1x2x1x2 at 50
    four = got[4]
    assert (four.best_layout, four.best_ms, four.default_layout, four.default_ms) == ("1x2x1x2", 50.0, "1x1x2x2", 62.0)
    assert four.vs_default == pytest.approx(62 / 50) and four.vs_one_gpu == pytest.approx(300 / 50)
    assert (four.passed, four.failed, four.points) == (0, 4, 4)  # [20, 44] ms: every 4-GPU point fails
    two = got[2]
    assert (two.best_layout, two.default_layout, two.vs_default, two.vs_one_gpu) == ("1x1x1x2", "1x1x1x2", 1.0, 3.0)
    assert (two.passed, two.failed) == (0, 0)
    assert got[1].vs_one_gpu == 1.0 and got[1].default_layout == "1x1x1x1"
    fp = summary.fingerprint(rows)
    assert fp.same == (("torch", "2.13.0"),) and fp.differing == (("NCCL", ("2.21.5", "2.23.4")),)
    assert (fp.missing, fp.runs) == (0, 7)
    report = tmp_path / "r"
    build_report(rows, report, "synth")
    html = (report / "report.html").read_text()
    assert '<tr data-workload="" data-gpus="4">' in html and 'data-key="vs_default" data-value="1.24"' in html
    assert '<tr class="differs" data-key="NCCL">' in html


def test_report_sets_each_phase_beside_its_prediction_and_writes_numbers_plainly(tmp_path, run_cli, monkeypatch):
    """Issue 49: a generate point's phases (metrics.stages) beside the plan's predicted phases
    (plan.json's estimates.predicted.phases_s) as ``measured / predicted``, their totals and error;
    issue 51's wording: a fraction as a percentage, milliseconds without an exponent."""
    from sporch.orchestrator.cli.campaign_views import metric_text

    monkeypatch.setenv("COLUMNS", "200")
    root = make_generate_campaign(tmp_path / "g")
    phases = {"startup": 20.0, "stage": 0.0, "load": 2.0, "encode": 1.0, "denoise": 12.0, "switch": 0.0,
              "decode": 3.0, "save": 0.01}
    plan = {"estimates": {"predicted": {"job_s": 38.01, "gpu_hours": 0.0211, "phases_s": phases}}}
    (root / "points" / "g2" / "plan.json").write_text(json.dumps(plan))
    rows = {r.id: r for r in collect(root)}
    assert rows["g2"].metrics["predicted_encode_s"] == 1.0 and rows["g2"].metrics["predicted_gpu_hours"] == 0.0211
    assert "predicted_encode_s" not in rows["g4r"].metrics  # no plan.json: no prediction
    code, out, _ = run_cli("campaign", "report", root)
    assert code == 1  # g4r's decode misses its reference
    assert "phases: measured / predicted seconds" in out
    line = next(line for line in out.splitlines() if line.startswith("│ g2 ") and " / " in line)
    cells = [c.strip() for c in line.strip("│").split("│")]
    # startup, load, encode, denoise, decode, save; then the total of the phases both have and its error
    assert cells[2:] == ["21.5 / 20.0", "2.50 / 2.00", "1.23 / 1.00", "10.2 / 12.0", "3.75 / 3.00",
                         "0.0123 / 0.0100", "39.2 / 38.0", "-3%"]
    g4r = next(line for line in out.splitlines() if line.startswith("│ g4r") and " / " in line)
    assert "4.50 / -" in g4r  # measured, no prediction
    # table.csv keeps the predicted columns; the terminal's main table leaves them to the phases table
    with open(root / "report" / "table.csv") as fh:
        header = next(csv.reader(fh))
    assert "predicted_startup_s" in header and "predicted_gpu_hours" in header
    assert metric_text("prediction_error", -0.9465) == "-94.7%" and metric_text("step_ms_median", 10360.4) == "10,360"
    assert metric_text("step_ms_median", 12.345) == "12.3" and metric_text("step_ms_median", 0.5234) == "0.523"
    assert metric_text("step_ms_median", 2e-5) == "0.00002"  # never 2e-05
