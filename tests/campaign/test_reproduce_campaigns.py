"""examples/campaigns/reproduce/: one campaign per published table, every row of it (1, 2, 4 and 8
GPUs: a descriptor per GPU count, sporch plans whole descriptors), each point carrying the published
figure (orchestrator/plan/data/published.yaml) as its reference. The references are checked against
published.yaml (not typed twice), and each campaign plans exactly the table's rows, each on a
descriptor of as many GPUs as the row."""

from __future__ import annotations

import json

import pytest
import yaml

from sporch.orchestrator.plan import published
from sporch.orchestrator.plan.layouts import compact
from tests.testutil import ROOT

REPRODUCE = ROOT / "examples" / "campaigns" / "reproduce"
#: campaign file -> (published case, tolerance of its references, GPU counts of its rows)
CAMPAIGNS = {
    "xdit-flux-h100-eager.yaml": ("flux-dev-1024-h100-eager", 0.25, {1, 2, 4}),
    "xdit-flux-h100-compiled.yaml": ("flux-dev-1024-h100-compiled", 0.25, {1, 2, 4}),
    "diffusers-flux-l20.yaml": ("flux-dev-1024-l20-diffusers", 0.15, {4}),
    "wan21-t2v-14b-h800.yaml": ("wan21-t2v-14b-720p-h800", 0.25, {1, 2, 4, 8}),
    "xdit-hunyuanvideo-h100.yaml": ("hunyuanvideo-720p-h100", 0.25, {1, 2, 4, 8}),
    "xdit-issue416-flux-h100x8-eager.yaml": ("flux-dev-1024-h100x8-xdit-issue416", 0.25, {8}),
    "wan21-t2v-1.3b-rtx4090.yaml": ("wan21-t2v-1.3b-480p-rtx4090", 0.25, {1, 2, 4, 8}),
    "diffusers-flux-rtx4090.yaml": ("flux-dev-1024-rtx4090-diffusers", 0.15, {4}),
    "cachedit-flux-h100.yaml": ("flux-dev-1024-h100-cachedit", 0.25, {1, 2}),
}
#: Published tables without a reproduction campaign, and why: a campaign repeats a run whose
#: workload it knows.
NOT_REPRODUCED = {
    "flux-dev-h20-xdit-eager": "its source states neither the steps nor the image size",
    "flux-dev-h20-xdit-compiled": "its source states neither the steps nor the image size",
}


def test_every_campaign_there_is_checked():
    assert {p.name for p in REPRODUCE.glob("*.yaml") if "references" in p.read_text()} == set(CAMPAIGNS)


def test_every_published_table_with_a_known_workload_has_a_campaign():
    """One campaign per table of published.yaml, or a reason in NOT_REPRODUCED; ``later``: tables
    that repeat a source's table on another GPU or size, not yet campaigns (listed so that a table
    added to published.yaml is not missed silently)."""
    reproduced = {case for case, _, _ in CAMPAIGNS.values()}
    later = {"hunyuanvideo-720p-h20", "hunyuanvideo-720p-l20", "hunyuanvideo-960-h100", "hunyuanvideo-960-h20",
             "hunyuanvideo-960-l20", "consisid-480p-h100", "wan21-t2v-14b-720p-a800", "wan21-t2v-14b-720p-h20"}
    cases = {c["name"] for c in published.checked_cases()}
    assert cases == reproduced | set(NOT_REPRODUCED) | later
    assert not reproduced & set(NOT_REPRODUCED) and not reproduced & later
    for name in NOT_REPRODUCED:
        assert published.case(name).get("absolute") is False  # the reason given: a run of unstated size


@pytest.mark.parametrize("name", sorted(CAMPAIGNS))
def test_each_point_carries_the_published_figure(name, run_cli, monkeypatch):
    monkeypatch.chdir(ROOT)  # the campaigns name their descriptors from the repository root
    case_name, tol, gpu_counts = CAMPAIGNS[name]
    case = published.case(case_name)
    doc = yaml.safe_load((REPRODUCE / name).read_text())
    per_step = published.level(case) == "step"
    steps = case["workload"]["steps"]
    want = {compact(lay): s * 1e3 / (1 if per_step else steps) for lay, s in published.layouts(case)}
    refs = {r["where"]["layout"]: r["metrics"]["step_ms_median"] for r in doc["references"]}
    assert set(refs) == set(want)  # every row of the table
    for layout, (value, low, high, unit) in refs.items():
        assert value == pytest.approx(want[layout], abs=0.01) and (low, high, unit) == (-tol, tol, "ms"), layout
    w = doc["base"]["workload"]
    assert (w["height"], w["width"], w["steps"], w["compile"]) == (case["workload"]["height"],
                                                                    case["workload"]["width"], steps, case["compile"])
    assert w.get("frames", 1) == case["workload"].get("frames", 1)
    assert doc["base"]["model"]["preset"] == case["model"]
    code, out, err = run_cli("campaign", "plan", REPRODUCE / name, "--json")
    assert code == 0, err
    planned = json.loads(out)
    points = [(g, p) for g in planned["groups"] for p in g["points"]]
    layouts = [p["values"]["layout"] for _, p in points]  # as planned (a dim given as auto resolved)
    assert sorted(layouts) == sorted(refs)  # every point has its published figure, and no row is missing
    gpus = [g["shape"]["nodes"] * g["shape"]["gpus_per_node"] for g, _ in points]
    assert set(gpus) == gpu_counts
    for n, layout, (_, p) in zip(gpus, layouts, points):  # each row on a descriptor of its GPU count
        dp, cfg, ring, ulysses = map(int, layout.split("x"))
        assert p["values"]["gpus"] == n == ring * ulysses and dp == cfg == 1, (n, layout)
