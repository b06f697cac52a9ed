"""A small campaign run for real (tiny model, gloo ranks on CPU, emulated slurmlab nodes), then
reported: the report's numbers are the result files' numbers, the plots hold the measured series,
and the HTML page, opened in headless Debian chromium, shows the CSV's table.

The points run one after another through `sporch campaign run --local` (the `run --local` engine
under the campaign runner); a second run finds every point done and runs none again.
"""

from __future__ import annotations

import csv
import html
import json
import os
import re
import shutil
import statistics
import subprocess
from collections import defaultdict
from html.parser import HTMLParser
from pathlib import Path

import pytest

from sporch.orchestrator.campaign.collect import collect
from sporch.orchestrator.campaign.expand import expand
from sporch.orchestrator.campaign.metrics import GIB
from sporch.orchestrator.campaign.report_plot_data import plot_data
from sporch.orchestrator.campaign.spec import campaign_from_dict

REPO = Path(__file__).resolve().parents[2]
CHROMIUM = "/usr/bin/chromium"
#: Screenshots of the report page are kept here (ignored by git) as artefacts of the test run.
ARTIFACTS = REPO / "test-artifacts"

CAMPAIGN = {
    "name": "live",
    "base": {
        "model": {"preset": "tiny"},
        "workload": {"kind": "benchmark", "frames": 9, "height": 64, "width": 64, "guidance_scale": 1.0,
                     "dtype": "float32", "warmup": 1, "repeat": 3},
    },
    # 3 points: the default layout (Ulysses 2 in a node, ring across nodes) on 1 and 2 nodes, and
    # ring 2 on the 1-node size only (a layout's ``gpus``): a 4-rank ring point adds ranks, not checks
    "matrix": {"clusters": ["slurmlab"], "nodes": [1, 2],
               "layouts": [{"ulysses": 2, "ring": "auto"}, {"ulysses": 1, "ring": "auto", "gpus": 2}]},
    "references": [
        {"cluster": "slurmlab", "metrics": {"step_ms_median": [6e5, None, 0.0, "ms"],  # < the time limit: passes
                                            "comm_bytes_per_step": [1.0, None, 0.0, "bytes"]}},  # > 1 B: fails
    ],
}


@pytest.fixture(scope="module")
def campaign_dir(tmp_path_factory):
    """The campaign through `sporch campaign run --local`, then once more: nothing runs twice."""
    from sporch.orchestrator.cli.main import main

    folder = tmp_path_factory.mktemp("campaign")
    path = folder / "live.yaml"
    path.write_text(json.dumps({**CAMPAIGN, "output_dir": str(folder)}))  # JSON is YAML
    root = folder / "live"
    exp = expand(campaign_from_dict(CAMPAIGN))
    assert len(exp.points) == 3 and not exp.skipped
    assert main(["campaign", "run", "--local", str(path)]) == 0
    state = json.loads((root / "state.json").read_text())
    assert sorted(state["points"]) == sorted(p.id for p in exp.points)
    assert all(rec["submissions"] == 1 and rec["task"] == "local" for rec in state["points"].values())
    assert main(["campaign", "run", "--local", str(path)]) == 0  # resumed: every point done, none rerun
    assert json.loads((root / "state.json").read_text()) == state
    return root


def results(root: Path) -> dict[str, dict]:
    return {d.name: json.loads((d / "result.json").read_text()) for d in (root / "points").iterdir()}


@pytest.mark.slow
def test_points_record_what_the_issue_asks(campaign_dir):
    for pid, res in results(campaign_dir).items():
        m, plan = res["metrics"], json.loads((campaign_dir / "points" / pid / "plan.json").read_text())
        assert m["steps_timed"] == 3 and len(m["step_ms"]) == 3
        assert m["step_ms_min"] <= m["step_ms_median"] <= m["step_ms_p90"] <= max(m["step_ms"])
        assert m["tokens_per_s"] == pytest.approx(48 / (m["step_ms_median"] / 1e3))
        flops = plan["estimates"]["flops_per_step_per_rank"]
        assert m["tflops_per_gpu"] == pytest.approx(flops / (m["step_ms_median"] / 1e3) / 1e12)
        assert m["peak_fraction"] == pytest.approx(m["tflops_per_gpu"] / 0.1)  # slurmlab: 0.1 TFLOP/s
        # bytes this rank sent in one step: what the planner counts for the layout
        assert m["comm_bytes_per_step"] == plan["estimates"]["comm_bytes_per_rank_per_step"] > 0
        assert m["ideal_ms_per_step"] > 0 and m["comm_ms_per_step"] is not None
        prov = res["provenance"]
        assert prov["sporch_version"] and prov["torch_version"].startswith("2.")
        assert prov["cluster"]["name"] == "slurmlab" and prov["slurm_job_id"]
        assert prov["hosts"] == res["distinct_hosts"] and prov["node_list"]


@pytest.mark.slow
def test_report_numbers_plots_and_page_in_chromium(campaign_dir, tmp_path):
    from sporch.orchestrator.cli.main import main

    out = tmp_path / "report"
    code = main(["campaign", "report", str(campaign_dir), "--out", str(out)])
    assert code == 1  # the bytes reference fails on purpose; the latency one passes
    res = results(campaign_dir)
    with open(out / "table.csv") as fh:
        table = list(csv.DictReader(fh))
    assert sorted(r["id"] for r in table) == sorted(res)
    for row in table:
        m = res[row["id"]]["metrics"]
        for key in ("step_ms_median", "step_ms_p90", "step_ms_min", "tokens_per_s", "tflops_per_gpu",
                    "peak_fraction", "comm_ms_per_step", "ideal_ms_per_step"):
            assert float(row[key]) == m[key], key
        assert float(row["comm_bytes_per_step"]) == m["comm_bytes_per_step"]
        assert float(row["peak_memory_gib"]) == m["peak_memory_bytes"] / GIB
        assert row["reference"] == "fail"

    # plots: their data are the measured medians, one series per ulysses degree
    data = json.loads((out / "plots.json").read_text())
    assert data == plot_data(collect(campaign_dir))
    by_layout = {(r["gpus"], r["layout"]): float(r["step_ms_median"]) for r in table}
    lat = data["latency_vs_gpus"]["series"]
    assert set(lat) == {"ulysses1", "ulysses2"}
    assert lat["ulysses2"]["x"] == [2, 4] and lat["ulysses1"]["x"] == [2]
    for s in lat.values():
        assert s["y"] == [by_layout[(str(g), lay)] for g, lay in zip(s["x"], s["layout"])]
    (best,) = data["best_layout"]["series"].values()
    assert best["y"] == [min(v for (g, _), v in by_layout.items() if g == str(n)) for n in (2, 4)]
    for name in ("latency_vs_gpus", "scaling_efficiency", "comm_vs_compute", "best_layout"):
        assert (out / f"{name}.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"

    # the page in a real browser: the table it shows is the CSV
    if not Path(CHROMIUM).exists():
        if os.environ.get("SPORCH_REQUIRE_CHROMIUM") == "1":
            pytest.fail(f"{CHROMIUM} missing (scripts/test.sh installs it as root)")
        pytest.skip(f"{CHROMIUM} not installed (apt-get install chromium)")
    page = (out / "report.html").resolve().as_uri()
    dom = chromium(tmp_path, "--dump-dom", page)
    cells = TableParser.parse(dom)
    assert cells[0] == list(table[0].keys())
    assert [[c["data-value"] for c in row] for row in cells[1:]] == [list(r.values()) for r in table]
    marked = [k for row in cells[1:] for c in row for k in c.get("class", "").split()]
    assert "fail" in marked and "pass" in marked

    # the summary it opens with: per GPU count, computed here from the CSV
    medians: dict = defaultdict(list)
    for r in table:
        medians[(int(r["gpus"]), r["layout"], r["nodes"])].append(float(r["step_ms_median"]))
    medians = {k: statistics.median(v) for k, v in medians.items()}
    expected = {}
    for gpus in sorted({g for g, _, _ in medians}):
        here = {(lay, nodes): ms for (g, lay, nodes), ms in medians.items() if g == gpus}
        (best_layout, _), best_ms = min(here.items(), key=lambda kv: kv[1])
        default = [ms for (lay, nodes), ms in here.items() if lay == f"1x1x{nodes}x{gpus // int(nodes)}"]
        assert default, "the campaign measures the default layout at every size"
        verdicts = [r["reference"] for r in table if int(r["gpus"]) == gpus]
        expected[gpus] = {"best_layout": best_layout, "best_ms": best_ms, "default_ms": min(default),
                          "vs_default": min(default) / best_ms, "passed": verdicts.count("pass"),
                          "failed": verdicts.count("fail"), "points": len(verdicts)}
    assert 1 not in expected  # no 1-GPU point: that speed-up is left empty, not invented
    assert len(expected) == 2
    shown = {int(c["gpus"]): c for c in ({cell["data-key"]: cell["data-value"] for cell in row}
                                         for row in TableParser.parse(dom, "summary")[1:])}
    assert set(shown) == set(expected)
    for gpus, want in expected.items():
        got = shown[gpus]
        assert got["best_layout"] == want["best_layout"]
        for key in ("best_ms", "default_ms", "vs_default"):
            assert float(got[key]) == pytest.approx(want[key], rel=1e-12), (gpus, key)
        assert got["one_gpu_ms"] == got["vs_one_gpu"] == ""
        assert [int(got[k]) for k in ("passed", "failed", "points")] == \
            [want["passed"], want["failed"], want["points"]] == [0, want["points"], want["points"]]
    # the fingerprint the runs recorded (all on this machine: one value per field)
    prints = [res[pid]["fingerprint"] for pid in res]
    fp = {row[0]: row[1]["data-value"] for row in TableParser.parse(dom, "fingerprint")}
    assert fp["torch"] == prints[0]["torch"] and fp["sporch"] == prints[0]["sporch"]
    assert all(p["torch"] == prints[0]["torch"] for p in prints)
    assert "GPUs" not in fp and 'class="differs"' not in dom  # a point's GPU count is no environment change

    # 1280 px wide: nothing runs off the right edge (the page, the summary, the table in its
    # box), and a click on a column's name sorts the rows by it
    probe = tmp_path / "probe.html"
    probe.write_text((out / "report.html").read_text().replace("</body>", MEASURE + "</body>"))
    measured = chromium(tmp_path, "--window-size=1280,1000", "--virtual-time-budget=5000", "--dump-dom",
                        probe.as_uri())
    m = json.loads(html.unescape(re.search(r'data-measure="([^"]*)"', measured).group(1)))
    assert m["inner"] == 1280, m
    assert m["page"] <= 1280 and m["summary"] <= 1280 and m["table"] <= m["box"] <= 1280, m
    assert m["order"] == [r["id"] for r in sorted(table, key=lambda r: float(r["step_ms_median"]))]
    assert m["all_groups"] > m["table"]  # every group shown: wider (its box scrolls), so hiding is real
    shot = tmp_path / "report.png"
    chromium(tmp_path, f"--screenshot={shot}", "--window-size=1280,1800", page)
    assert shot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    ARTIFACTS.mkdir(exist_ok=True)
    shutil.copyfile(shot, ARTIFACTS / "campaign-report.png")


#: Appended to a copy of the page: once it has loaded, the widths that matter (CSS px) and the
#: row order after a click on step_ms_median, written into the DOM for --dump-dom.
MEASURE = """<script>
window.addEventListener("load", function () {
  var t = document.getElementById("points"), box = t.parentElement;
  var right = function (el) { return Math.ceil(el.getBoundingClientRect().right); };
  var m = {inner: window.innerWidth, page: document.documentElement.scrollWidth,
           summary: right(document.getElementById("summary")), table: Math.ceil(t.scrollWidth),
           box: Math.min(box.clientWidth, right(box))};
  t.querySelector("th[data-col=step_ms_median]").click();
  m.order = Array.prototype.map.call(t.tBodies[0].rows, function (r) { return r.getAttribute("data-id"); });
  document.querySelectorAll("#column-groups input").forEach(function (b) {
    if (!b.checked) { b.click(); }
  });
  m.all_groups = Math.ceil(t.scrollWidth);
  document.body.setAttribute("data-measure", JSON.stringify(m));
});
</script>
"""


def chromium(tmp: Path, *args: str) -> str:
    profile = tmp / "chromium-profile"
    cmd = [CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
           "--disable-background-networking", "--disable-component-update", "--disable-sync",
           f"--user-data-dir={profile}", *args]
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr[-2000:]
    return r.stdout


class TableParser(HTMLParser):
    """Rows of table#<table_id>: header cells as their texts, other cells as their attributes."""

    def __init__(self, table_id: str) -> None:
        super().__init__()
        self.table_id = table_id
        self.rows: list[list] = []
        self.inside = False
        self.cell: dict | None = None

    @classmethod
    def parse(cls, html: str, table_id: str = "points") -> list[list]:
        p = cls(table_id)
        p.feed(html)
        return p.rows

    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        if tag == "table" and a.get("id") == self.table_id:
            self.inside = True
        elif self.inside and tag == "tr":
            self.rows.append([])
        elif self.inside and tag in ("td", "th"):
            self.cell = {**a, "text": ""}

    def handle_endtag(self, tag):
        if tag == "table":
            self.inside = False
        elif self.inside and tag in ("td", "th") and self.cell is not None:
            self.rows[-1].append(self.cell["text"] if tag == "th" else self.cell)
            self.cell = None

    def handle_data(self, data):
        if self.cell is not None:
            self.cell["text"] += data
