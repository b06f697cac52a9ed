"""Speed levers as campaign axes (issue 36): ``quants``, ``attention_precisions``, ``steps``
and ``recipes`` crossed with layouts and caches; every compared point's PSNR/SSIM/latent
difference against the full-quality reference point; the Pareto-optimal points marked in the
CSV and starred on the report's speed_vs_psnr plot."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import pytest

from sporch.orchestrator.campaign import pareto
from sporch.orchestrator.campaign.collect import collect, columns
from sporch.orchestrator.campaign.expand import expand
from sporch.orchestrator.campaign.outputs import pick_reference
from sporch.orchestrator.campaign.report import build_report
from sporch.orchestrator.campaign.report_plot_data import SPEED_QUALITY, plot_data
from sporch.orchestrator.campaign.spec import campaign_from_dict, load_campaign
from sporch.orchestrator.errors import SporchError

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "examples" / "campaigns" / "tiny-levers.yaml"
BASE = {"model": {"preset": "tiny"},
        "workload": {"kind": "inference", "frames": 9, "height": 64, "width": 64, "steps": 8, "dtype": "float32"}}


def test_the_example_crosses_quant_cache_and_layout(monkeypatch):
    monkeypatch.chdir(ROOT)
    exp = expand(load_campaign(EXAMPLE))
    got = sorted((v["layout"], v["quant"], v["cache"]) for v in (p.match_values() for p in exp.points))
    assert got == sorted((lay, q, c) for lay in ("1x1x1x1", "1x1x1x2") for q in ("none", "int8_weight")
                         for c in ("none", "teacache@1.5"))
    for p in exp.points:
        assert p.plan.model.quant == p.match_values()["quant"]


def test_levers_reach_the_plans_and_keep_other_campaigns_ids():
    camp = campaign_from_dict({"name": "lv", "base": BASE, "matrix": {
        "clusters": ["local"], "layouts": [{"ulysses": 4, "ring": 1}],
        "quants": ["none", "int8_weight"], "attention_precisions": ["exact", "lossy"], "steps": [8, 4],
        "recipes": [{"name": "base"}, {"name": "fast", "set": {"workload.shift": 5.0, "workload.steps": 2}}]}})
    exp = expand(camp)
    assert len(exp.points) == 2 * 2 * 2 * 2 and not exp.skipped
    for p in exp.points:
        v, plan = p.match_values(), p.plan
        assert plan.model.quant == v["quant"] and plan.workload.attention_precision == v["attention"]
        assert plan.workload.steps == v["steps"] == p.params["steps"]  # the steps axis wins over a recipe's
        assert plan.workload.shift == (5.0 if v["recipe"] == "fast" else None)
    plain = expand(campaign_from_dict({"name": "lv", "base": BASE, "matrix": {
        "clusters": ["local"], "layouts": [{"ulysses": 4, "ring": 1}]}}))
    assert all(set(p.params) == {"cluster", "nodes", "preset", "shape", "dtype", "layout", "repeat"}
               for p in plain.points)


def test_a_refused_lever_is_a_skipped_point_with_the_reason():
    exp = expand(campaign_from_dict({"name": "lv", "base": BASE, "matrix": {
        "clusters": ["local"], "layouts": [{"ulysses": 2, "ring": 2}], "attention_precisions": ["exact", "lossy"]}}))
    assert len(exp.points) == 1 and len(exp.skipped) == 1
    assert "returns no log-sum-exp" in exp.skipped[0].reason


@pytest.mark.parametrize("matrix,needle", [
    ({"quants": ["int4"]}, "'matrix.quants' entry 'int4' is not one of none, int8_weight"),
    ({"attention_precisions": ["fast"]}, "'matrix.attention_precisions' entry 'fast'"),
    ({"steps": [4, 0]}, "'matrix.steps' entries must be integers >= 1"),
    ({"steps": [4, 4]}, "'matrix.steps' repeats a value"),
    ({"recipes": [{"name": "a b"}]}, "'matrix.recipes[0].name' must be letters"),
    ({"recipes": [{"name": "x", "set": {"steps": 4}}]}, "keys are dotted job keys"),
    ({"recipes": [{"name": "base", "set": {"workload.steps": 4}}]}, "'base' is the unchanged job"),
])
def test_bad_lever_axes_are_one_line_errors(matrix, needle):
    with pytest.raises(SporchError, match=None) as err:
        campaign_from_dict({"name": "lv", "base": BASE, "matrix": {"clusters": ["local"], **matrix}})
    assert needle in str(err.value) and "\n" not in str(err.value)


class _Row:
    def __init__(self, id, values, metrics=None, ok=True):
        self.id, self.values, self.metrics, self.ok = id, values, metrics or {}, ok


def test_the_reference_is_the_full_quality_point():
    rows = [_Row("a", {"layout": "1x1x1x1", "quant": "int8_weight", "cache": "none", "steps": 8, "gpus": 1}),
            _Row("b", {"layout": "1x1x1x1", "quant": "none", "cache": "none", "steps": 4, "gpus": 1}),
            _Row("c", {"layout": "1x1x1x1", "quant": "none", "cache": "none", "steps": 8, "gpus": 1}),
            _Row("d", {"layout": "1x1x1x1", "quant": "none", "cache": "none", "steps": 8, "attention": "lossy",
                       "gpus": 1})]
    assert pick_reference(rows, None).id == "c" and pick_reference(rows, "1x1x1x1").id == "c"


def test_pareto_marks_the_points_no_other_beats_on_both():
    rows = [_Row("ref", {}, {"stage_denoise_s": 10.0, "psnr_db": float("inf")}),
            _Row("fast", {}, {"stage_denoise_s": 2.0, "psnr_db": 30.0}),
            _Row("mid", {}, {"stage_denoise_s": 5.0, "psnr_db": 40.0}),
            _Row("worse", {}, {"stage_denoise_s": 6.0, "psnr_db": 35.0}),  # mid is faster and closer
            _Row("tie", {}, {"stage_denoise_s": 2.0, "psnr_db": 29.0}),  # fast: as fast, closer
            _Row("failed", {}, {"stage_denoise_s": 1.0, "psnr_db": 50.0}, ok=False)]
    assert pareto.optimal_ids(rows) == {"ref", "fast", "mid"}
    pareto.mark(rows)
    assert [r.values.get("pareto") for r in rows] == ["yes", "yes", "yes", "no", "no", None]


def _campaign(root: Path) -> Path:
    """Four generate points of one subject (fingerprints differ, as steps/quant change them):
    the full-quality one, int8 weights, a cache, and fewer steps."""
    np = pytest.importorskip("numpy")
    pytest.importorskip("skimage")
    iio = pytest.importorskip("imageio.v3")
    from safetensors.numpy import save_file

    rng = np.random.default_rng(0)
    lat = rng.standard_normal((4, 2, 4, 4)).astype(np.float32)
    img = rng.integers(0, 256, (32, 32, 3), dtype=np.uint8)
    root.mkdir()
    (root / "campaign.yaml").write_text("name: c\n")
    points = (("ref", "none", "none", 8, 0, 10.0), ("q8", "int8_weight", "none", 8, 2, 9.0),
              ("tea", "none", "teacache@1", 8, 6, 6.0), ("few", "none", "none", 4, 10, 5.0),
              ("slow", "int8_weight", "teacache@1", 8, 12, 9.5))
    for pid, quant, cache, steps, noise, seconds in points:
        d = root / "points" / pid
        (d / "latents").mkdir(parents=True)
        (d / "point.json").write_text(json.dumps({"id": pid, "values": {
            "cluster": "local", "nodes": 1, "gpus": 1, "layout": "1x1x1x1", "preset": "tiny", "shape": "1x32x32",
            "dtype": "float32", "repeat": 0, "cache": cache, "quant": quant, "steps": steps}}))
        save_file({"latents": lat + np.float32(noise / 100)}, str(d / "latents" / "00000.safetensors"),
                  metadata={"fingerprint": f"fp-{pid}", "subject": "one-subject", "index": "0"})
        iio.imwrite(d / "0000-fox.png", np.clip(img.astype(int) + noise, 0, 255).astype(np.uint8))
        (d / "result.json").write_text(json.dumps({
            "status": "completed", "workload": "generate", "outputs": [{"index": 0, "file": "0000-fox.png"}],
            "metrics": {"kind": "generate", "stages": {"denoise": {"s": seconds}}}}))
    return root


def test_report_compares_every_lever_with_the_reference_and_stars_the_front(tmp_path):
    root = _campaign(tmp_path / "c")
    rows = {r.id: r for r in collect(root)}
    assert all(r.output_ref == "ref" for r in rows.values()), {r.id: (r.output_ref, r.output_note) for r in rows.values()}
    assert rows["ref"].metrics["psnr_db"] == float("inf")
    assert rows["few"].metrics["latent_max_abs_err"] == pytest.approx(0.10)
    assert rows["q8"].metrics["psnr_db"] > rows["tea"].metrics["psnr_db"] > rows["few"].metrics["psnr_db"]
    assert {i for i, r in rows.items() if r.values.get("pareto") == "yes"} == {"ref", "q8", "tea", "few"}
    cols = columns(list(rows.values()))
    assert cols[cols.index("dtype") + 1: cols.index("dtype") + 4] == ["cache", "quant", "steps"]
    assert "pareto" in cols
    out = build_report(list(rows.values()), tmp_path / "report", "c")
    with open(out["csv"]) as fh:
        table = {r["id"]: r for r in csv.DictReader(fh)}
    assert table["slow"]["pareto"] == "no" and table["few"]["pareto"] == "yes"
    assert float(table["q8"]["psnr_db"]) == rows["q8"].metrics["psnr_db"]
    data = plot_data(list(rows.values()))[SPEED_QUALITY]
    by_label = {label.split()[0]: (s, q, p) for label, s, q, p in
                zip(data["labels"], data["seconds"], data["psnr_db"], data["pareto"])}
    assert by_label["ref"] == (10.0, None, True) and by_label["slow"][2] is False
    assert by_label["few"][:2] == (5.0, rows["few"].metrics["psnr_db"])
    assert out[SPEED_QUALITY].read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert "speed_vs_psnr" in out["html"].read_text()


def test_the_pareto_plot_and_column_in_chromium(tmp_path):
    """The report page opened in headless chromium: the speed_vs_psnr plot is on it and loads as an
    image, and the table it shows has the CSV's pareto column."""
    import os

    from tests.campaign.test_campaign_live import CHROMIUM, TableParser, chromium

    if not Path(CHROMIUM).exists():
        if os.environ.get("SPORCH_REQUIRE_CHROMIUM") == "1":
            pytest.fail(f"{CHROMIUM} missing (scripts/test.sh installs it as root)")
        pytest.skip(f"{CHROMIUM} not installed (apt-get install chromium)")
    rows = list(collect(_campaign(tmp_path / "c")))
    out = build_report(rows, tmp_path / "report", "c")
    with open(out["csv"]) as fh:
        table = list(csv.DictReader(fh))
    dom = chromium(tmp_path, "--dump-dom", out["html"].resolve().as_uri())
    import base64
    import re

    figures = dict(re.findall(r'<img id="plot-([^"]+)"[^>]*? src="data:image/png;base64,([^"]+)"', dom))
    assert base64.b64decode(figures[SPEED_QUALITY]) == out[SPEED_QUALITY].read_bytes()
    cells = TableParser.parse(dom)
    col = cells[0].index("pareto")
    assert [row[col]["data-value"] for row in cells[1:]] == [r["pareto"] for r in table]
    assert {r["pareto"] for r in table} == {"yes", "no"}
    shot = tmp_path / "levers.png"
    chromium(tmp_path, f"--screenshot={shot}", "--window-size=1280,1600", out["html"].resolve().as_uri())
    assert shot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and shot.stat().st_size > 10_000
