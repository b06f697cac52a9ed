"""The speed-lever campaign run for real on the loopback Slurm lab (issue 36, "a tiny campaign crossing
quant x cache x layout finishes on the loopback lab with the Pareto plot"): examples/campaigns/
tiny-levers.yaml pointed at the lab (one node of 2 emulated GPUs, Ulysses 2 and ring 2), submitted with
`sporch campaign run` as a job array, reported with `sporch campaign report`; the report's quality
columns, Pareto marks and speed_vs_psnr plot are checked against the measured points, and the page in
headless chromium shows that plot.
"""

from __future__ import annotations

import base64
import csv
import json
import math
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from tests.campaign.test_campaign_live import CHROMIUM, chromium

pytestmark = [pytest.mark.slurm, pytest.mark.slow]

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "examples" / "campaigns" / "tiny-levers.yaml"


def on_the_lab(text: str) -> str:
    """The example with its matrix on the lab: one node, its two GPUs as Ulysses 2 or ring 2."""
    text, n = re.subn(r"(?m)^  clusters: .*", "  clusters: [slurmlab]", text)
    text, m = re.subn(r"nodes: \[1, 2\]", "nodes: [1]", text)
    text, k = re.subn(r"layouts:\n(    - .*\n)+", "layouts:\n    - {ulysses: 2, ring: 1}\n    - {ulysses: 1, ring: 2}\n",
                      text)
    text, r = re.subn(r"reference: \S+", "reference: 1x1x1x2", text)
    assert (n, m, k, r) == (1, 1, 1, 1), "tiny-levers.yaml changed shape; update on_the_lab"
    return text


@pytest.fixture(scope="module")
def report(slurm_cluster, tmp_path_factory):
    root = tmp_path_factory.mktemp("levers-lab")
    (root / "levers.yaml").write_text(on_the_lab(EXAMPLE.read_text()))
    env = {**os.environ, "SPORCH_HOME": str(root / "home")}

    def cli(*args):
        p = subprocess.run([sys.executable, "-m", "sporch.orchestrator.cli.main", *args], cwd=root, env=env,
                           capture_output=True, text=True, timeout=900)
        assert p.returncode == 0, p.stdout[-2000:] + p.stderr[-2000:]
        return p

    cli("campaign", "run", "levers.yaml")
    cdir = root / "campaigns" / "tiny-levers"
    cli("campaign", "report", str(cdir))
    with open(cdir / "report" / "table.csv") as fh:
        rows = list(csv.DictReader(fh))
    return cdir, rows, root


def test_every_point_of_quant_x_cache_x_layout_ran_on_the_lab(report):
    cdir, rows, _ = report
    state = json.loads((cdir / "state.json").read_text())
    assert state["arrays"], "the points were not submitted as a Slurm job array"
    assert sorted((r["layout"], r["quant"], r["cache"]) for r in rows) == sorted(
        (lay, q, c) for lay in ("1x1x1x2", "1x1x2x1") for q in ("none", "int8_weight")
        for c in ("none", "teacache@1.5"))
    assert {r["status"] for r in rows} == {"completed"} and {r["cluster"] for r in rows} == {"slurmlab"}


def test_quality_columns_say_what_each_lever_costs(report):
    _, rows, _ = report
    by = {(r["layout"], r["quant"], r["cache"]): r for r in rows}
    ref = by[("1x1x1x2", "none", "none")]
    assert math.isinf(float(ref["psnr_db"])) and float(ref["ssim"]) == 1.0
    # ring 2 instead of Ulysses 2 at full quality: the same frames
    assert math.isinf(float(by[("1x1x2x1", "none", "none")]["psnr_db"]))
    for lay in ("1x1x1x2", "1x1x2x1"):
        q8 = by[(lay, "int8_weight", "none")]
        assert 30.0 < float(q8["psnr_db"]) < math.inf and float(q8["latent_max_abs_err"]) > 0.0
        tea = by[(lay, "none", "teacache@1.5")]
        assert float(tea["steps_skipped"]) > 0 and float(tea["psnr_db"]) < math.inf
    # every rank of a replica decides together: both layouts skip the same number of steps
    assert by[("1x1x1x2", "none", "teacache@1.5")]["steps_skipped"] == \
        by[("1x1x2x1", "none", "teacache@1.5")]["steps_skipped"]


def test_the_pareto_column_and_plot_hold_the_measured_front(report):
    cdir, rows, _ = report
    speed = {r["id"]: float(r["stage_denoise_s"]) for r in rows}
    psnr = {r["id"]: float(r["psnr_db"]) for r in rows}

    def beaten(i):
        return any(speed[j] <= speed[i] and psnr[j] >= psnr[i] and (speed[j] < speed[i] or psnr[j] > psnr[i])
                   for j in speed if j != i)

    assert {r["id"]: r["pareto"] for r in rows} == {i: "no" if beaten(i) else "yes" for i in speed}
    data = json.loads((cdir / "report" / "plots.json").read_text())["speed_vs_psnr"]
    plotted = {label.split()[0]: (s, p) for label, s, p in zip(data["labels"], data["seconds"], data["pareto"])}
    assert sorted(plotted) == sorted(i[:8] for i in speed)
    for r in rows:
        seconds, on_front = plotted[r["id"][:8]]
        assert seconds == pytest.approx(speed[r["id"]], rel=1e-5)
        assert on_front is (r["pareto"] == "yes")
    png = cdir / "report" / "speed_vs_psnr.png"
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_the_lab_report_page_shows_the_plot_in_chromium(report, tmp_path):
    cdir, _, _ = report
    if not Path(CHROMIUM).exists():
        if os.environ.get("SPORCH_REQUIRE_CHROMIUM") == "1":
            pytest.fail(f"{CHROMIUM} missing (scripts/test.sh installs it as root)")
        pytest.skip(f"{CHROMIUM} not installed (apt-get install chromium)")
    page = cdir / "report" / "report.html"
    dom = chromium(tmp_path, "--dump-dom", page.resolve().as_uri())
    figures = dict(re.findall(r'<img id="plot-([^"]+)"[^>]*? src="data:image/png;base64,([^"]+)"', dom))
    assert base64.b64decode(figures["speed_vs_psnr"]) == (cdir / "report" / "speed_vs_psnr.png").read_bytes()
