"""examples/campaigns/reproduce/: one campaign per published table that a 4-GPU node can repeat,
each point carrying the published figure (orchestrator/plan/data/published.yaml) as its reference.
The references are checked against published.yaml (not typed twice), and each campaign plans."""

from __future__ import annotations

import json

import pytest
import yaml

from sporch.orchestrator.contract.plan import Layout
from sporch.orchestrator.plan import published
from sporch.orchestrator.plan.layouts import compact
from tests.testutil import ROOT

REPRODUCE = ROOT / "examples" / "campaigns" / "reproduce"
#: campaign file -> (published case, tolerance of its references)
CAMPAIGNS = {
    "xdit-flux-h100-eager.yaml": ("flux-dev-1024-h100-eager", 0.25),
    "xdit-flux-h100-compiled.yaml": ("flux-dev-1024-h100-compiled", 0.25),
    "diffusers-flux-l20.yaml": ("flux-dev-1024-l20-diffusers", 0.15),
}


@pytest.mark.parametrize("name", sorted(CAMPAIGNS))
def test_each_point_carries_the_published_figure(name, run_cli, monkeypatch):
    monkeypatch.chdir(ROOT)  # the campaigns name their descriptors from the repository root
    case_name, tol = CAMPAIGNS[name]
    case = published.case(case_name)
    doc = yaml.safe_load((REPRODUCE / name).read_text())
    per_step = published.level(case) == "step"
    steps = case["workload"]["steps"]
    want = {compact(lay): s * 1e3 / (1 if per_step else steps) for lay, s in published.layouts(case)}
    refs = {r["where"]["layout"]: r["metrics"]["step_ms_median"] for r in doc["references"]}
    assert set(refs) <= set(want) and len(refs) == 3
    for layout, (value, low, high, unit) in refs.items():
        assert value == pytest.approx(want[layout], abs=0.01) and (low, high, unit) == (-tol, tol, "ms"), layout
    w = doc["base"]["workload"]
    assert (w["height"], w["width"], w["steps"], w["compile"]) == (case["workload"]["height"],
                                                                    case["workload"]["width"], steps, case["compile"])
    code, out, err = run_cli("campaign", "plan", REPRODUCE / name, "--json")
    assert code == 0, err
    points = [p for g in json.loads(out)["groups"] for p in g["points"]]
    assert sorted(compact(Layout(**{k: p["params"]["layout"].get(k, 1) for k in ("dp", "cfg", "ring", "ulysses")}))
                  for p in points) == sorted(refs)
