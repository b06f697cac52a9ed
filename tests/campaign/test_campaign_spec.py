"""Campaign files: loading errors, expansion through the planner, point ids, resource groups,
references."""

from __future__ import annotations

import copy

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sporch.orchestrator.campaign.expand import expand, point_id
from sporch.orchestrator.campaign.groups import group_points
from sporch.orchestrator.campaign.references import FAIL, NONE, PASS, evaluate, parse_references, select
from sporch.orchestrator.campaign.spec import ReferenceSpec, campaign_from_dict, load_campaign
from sporch.orchestrator.config.job import job_from_dict, load_job
from sporch.orchestrator.config.cluster import find_cluster
from sporch.orchestrator.plan.layouts import compact, feasible_layouts
from sporch.orchestrator.plan.planner import job_context, make_plan
from tests.testutil import EXAMPLES, write

TINY_BASE = {
    "model": {"preset": "tiny"},
    "workload": {"kind": "benchmark", "frames": 9, "height": 64, "width": 64, "dtype": "float32",
                 "guidance_scale": 3.0},
}


def tiny(**matrix):
    return campaign_from_dict({"name": "t", "base": copy.deepcopy(TINY_BASE),
                               "matrix": {"clusters": ["slurmlab"], **matrix}})


def test_realistic_example_expands_every_accepted_layout():
    c = load_campaign(EXAMPLES / "campaigns" / "wan14b-720p.yaml")
    exp = expand(c)
    # a100x32 has 4 nodes: 8 nodes is refused with the planner's reason, the rest expand.
    assert [s.params["nodes"] for s in exp.skipped] == [8]
    assert "exceeds the 4 nodes of a100x32" in exp.skipped[0].reason
    base = load_job(EXAMPLES / "wan14b-720p.yaml")
    cluster = find_cluster("a100x32")
    for nodes in (1, 2, 4):
        base.resources.nodes = nodes
        want = sorted(compact(lay) for lay in feasible_layouts(job_context(cluster, base)))
        got = sorted(compact(p.plan.layout) for p in exp.points if p.plan.nodes == nodes)
        assert got == want and got
    groups = group_points(exp.points)
    assert [(g.shape["nodes"], len(g.points)) for g in groups] == [
        (n, sum(1 for p in exp.points if p.plan.nodes == n)) for n in (1, 2, 4)]


def test_points_are_the_planners_plans():
    c = tiny(nodes=[2], layouts=[{"ulysses": 2, "ring": 2}])
    (p,) = expand(c).points
    job = job_from_dict({**TINY_BASE, "name": "x", "parallel": {"ulysses": 2, "ring": 2},
                         "resources": {"nodes": 2}})
    ref = make_plan(find_cluster("slurmlab"), job).to_dict()
    got = p.plan.to_dict()
    for key in ("layout", "ranks", "groups", "model", "workload", "sequence", "heads", "estimates"):
        assert got[key] == ref[key], key
    assert got["job"]["name"] == f"t-{p.id}"


def test_skipped_points_carry_the_planners_reason():
    c = tiny(nodes=[1, 2], layouts=[{"ulysses": 8}, {"ulysses": 2}],
             shapes=[{"frames": 9, "height": 64, "width": 64}, {"frames": 8, "height": 64, "width": 64}])
    exp = expand(c)
    reasons = [s.reason for s in exp.skipped]
    assert any("frames 8 must be 1 + a multiple of the VAE time stride" in r for r in reasons)
    assert any("ranks, but slurmlab has" in r for r in reasons)  # ulysses 8 on 2 or 4 ranks
    assert all(p.plan.layout.ulysses == 2 and p.plan.workload.frames == 9 for p in exp.points)
    assert len(exp.points) == 2


def test_models_that_do_not_fit_are_skipped():
    c = campaign_from_dict({"name": "big", "base": {"model": {"preset": "wan2.1-t2v-14b"}, "workload": {
        "kind": "benchmark", "frames": 81, "height": 720, "width": 1280}}, "matrix": {"clusters": ["slurmlab"]}})
    exp = expand(c)
    assert not exp.points and "exceeds 90% of the 4 GiB" in exp.skipped[0].reason


def test_all_auto_pow2_repeats_presets_dtypes():
    c = tiny(nodes="pow2", layouts="all", repeats=2, dtypes=["float32", "bfloat16"])
    exp = expand(c)
    worlds = sorted({p.plan.world_size for p in exp.points})
    assert worlds == [2, 4, 8]  # slurmlab: 4 nodes x 2
    assert {p.params["repeat"] for p in exp.points} == {0, 1}
    assert {p.plan.workload.dtype for p in exp.points} == {"float32", "bfloat16"}
    auto = expand(tiny(nodes=[2], layouts="auto"))
    # auto = the fastest predicted layout (cost model, issue 14): CFG parallel needs no collective
    # inside a step, so cfg 2 x ring 2 beats ulysses 2 x ring 2 (the old fixed preference)
    assert [compact(p.plan.layout) for p in auto.points] == ["1x2x2x1"]
    assert auto.points[0].plan.estimates.layout_choice.startswith("auto chose 1x2x2x1")
    assert auto.points[0].params["layout"] == "auto"
    presets = expand(campaign_from_dict({"name": "p", "base": copy.deepcopy(TINY_BASE), "matrix": {
        "clusters": ["local"], "presets": ["tiny", "tiny-flux"], "shapes": [{"height": 64, "width": 64}]}}))
    assert {p.plan.model.preset for p in presets.points} == {"tiny", "tiny-flux"}


def test_ids_are_stable_when_points_are_added():
    small = expand(tiny(nodes=[1], layouts=[{"ulysses": 2}]))
    big = expand(tiny(nodes=[1, 2], layouts=[{"ulysses": 1, "ring": "auto"}, {"ulysses": 2, "ring": "auto"}]))
    small_ids = {p.id for p in small.points}
    # {ulysses: 2} and {ulysses: 2, ring: auto} are different requests, so different ids...
    assert not small_ids & {p.id for p in big.points}
    bigger = expand(tiny(nodes=[1, 2, 4], layouts=[{"ulysses": 1, "ring": "auto"}, {"ulysses": 2, "ring": "auto"},
                                                   {"ulysses": 2, "ring": "auto", "cfg": 2}]))
    # ...but adding node counts and layouts keeps every existing id.
    assert {p.id for p in big.points} < {p.id for p in bigger.points}
    assert len({p.id for p in bigger.points}) == len(bigger.points)


@settings(max_examples=60, deadline=None)
@given(st.dictionaries(st.sampled_from(["cluster", "nodes", "layout", "preset", "dtype", "repeat", "shape"]),
                       st.one_of(st.integers(0, 64), st.text(max_size=8), st.none(),
                                 st.dictionaries(st.sampled_from(["dp", "ring"]), st.integers(1, 8))),
                       min_size=1))
def test_point_id_is_a_function_of_the_parameters_only(params):
    shuffled = dict(reversed(list(params.items())))
    assert point_id(params) == point_id(shuffled)
    assert len(point_id(params)) == 12
    changed = {**params, "repeat": "other" if params.get("repeat") != "other" else "x"}
    assert point_id(changed) != point_id(params)


def test_a_layout_with_gpus_makes_points_only_on_that_many_gpus():
    # slurmlab: 2 GPUs a node; 1 node = 2 GPUs, 2 nodes = 4
    c = tiny(nodes=[1, 2], layouts=[{"ulysses": 2, "gpus": 2}, {"ring": 2, "ulysses": 2, "gpus": 4}])
    exp = expand(c)
    assert not exp.skipped  # an entry for another GPU count is not tried, so not refused either
    assert sorted((p.plan.nodes, compact(p.plan.layout)) for p in exp.points) == [(1, "1x1x1x2"), (2, "1x1x2x2")]
    # gpus is not a point parameter: the same points as the entries without it have the same ids
    plain = {p.id for p in expand(tiny(nodes=[1, 2], layouts=[{"ulysses": 2}, {"ring": 2, "ulysses": 2}])).points}
    assert {p.id for p in exp.points} <= plain


def test_groups_split_on_every_resource_difference():
    exp = expand(tiny(nodes=[1, 2], layouts="all"))
    groups = group_points(exp.points)
    assert len(groups) == 2
    for g in groups:
        assert {p.plan.nodes for p in g.points} == {g.shape["nodes"]}
    c2 = tiny(nodes=[1], layouts="all")
    c2.base.resources.time = "00:01:00"
    g2 = group_points(expand(c2).points)
    assert g2[0].key != next(g.key for g in groups if g.shape["nodes"] == 1)
    assert g2[0].shape["time"] == "00:01:00"


@pytest.mark.parametrize("body, message", [
    ("matrix: {clusters: []}\nbase: {model: {preset: tiny}}", "'matrix.clusters' needs at least one cluster"),
    ("base: {model: {preset: tiny}}\nmatrix: {clusters: [local], nodse: [1]}", "unknown key 'matrix.nodse'"),
    ("base: {model: {preset: tiny}}\nmatrix: {clusters: [local], nodes: [0]}", "'matrix.nodes' must be a list"),
    ("base: {model: {preset: tiny}}\nmatrix: {clusters: [local], layouts: some}", "'matrix.layouts' must be a list"),
    ("base: {model: {preset: tiny}}\nmatrix: {clusters: [local], layouts: [{rings: 2}]}", "unknown dimension 'rings'"),
    ("base: {model: {preset: tiny}}\nmatrix: {clusters: [local], layouts: [{ring: -1}]}", "positive integer or 'auto'"),
    ("base: {model: {preset: tiny}}\nmatrix: {clusters: [local], layouts: [{ring: 2, gpus: 0}]}",
     "'matrix.layouts[0].gpus' must be a positive integer"),
    ("base: {model: {preset: tiny}}\nmatrix: {clusters: [local], layouts: [{dp: 1, cfg: 1, ring: 2, ulysses: 2, gpus: 8}]}",
     "asks for 4 GPUs but says gpus: 8"),
    ("base: {model: {preset: tiny}}\nmatrix: {clusters: [local], repeats: 0}", "'matrix.repeats' must be >= 1"),
    ("base: {model: {preset: tiny}}\nmatrix: {clusters: [local], repeats: two}", "wrong type for 'matrix.repeats'"),
    ("base: {model: {preset: tiny}}\nmatrix: {clusters: [local], dtypes: [fp8]}", "'matrix.dtypes' entry 'fp8'"),
    ("base: {model: {preset: tiny}}\nmatrix: {clusters: [local], presets: [nope]}", "unknown preset 'nope'"),
    ("base: {model: {preset: tiny}}\nmatrix: {clusters: [local], shapes: [{height: 64}]}", "needs height and width"),
    ("base: missing.yaml\nmatrix: {clusters: [local]}", "job file 'missing.yaml' not found"),
    ("matrix: {clusters: [local]}", "'base' is missing"),
    ("base: {model: {preset: tiny}}\nmatrix: {clusters: [local]}\nrun: {throttle: 0}", "'run.throttle' must be >= 1"),
    ("base: {model: {preset: tiny}}\nmatrix: {clusters: [local]}\nreferences: [{metrics: {speed: [1, 0, 0, ms]}}]",
     "unknown metric"),
    ("base: {model: {preset: tiny}}\nmatrix: {clusters: [local]}\n"
     "references: [{metrics: {step_ms_median: [1, -0.1, 0.1, s]}}]", "does not match the metric's unit 'ms'"),
    ("base: {model: {preset: tiny}}\nmatrix: {clusters: [local]}\n"
     "references: [{metrics: {step_ms_median: [1, 0.1]}}]", "must be [value, lower, upper, unit]"),
    ("base: {model: {preset: tiny}}\nmatrix: {clusters: [local]}\n"
     "references: [{where: {gpu: 4}, metrics: {step_ms_median: [1, 0.1, 0.1, ms]}}]", "unknown key 'gpu'"),
    ("base: {model: {preset: tiny}}\nmatrix: {clusters: [local]\n", "YAML syntax error"),
])
def test_bad_files_get_one_line_errors(tmp_path, run_cli, body, message):
    path = write(tmp_path, "c.yaml", body)
    code, out, err = run_cli("campaign", "plan", path)
    assert code == 2, (out, err)
    assert message in err, err
    assert err.count("\n") == 1 and "Traceback" not in err


def test_unknown_cluster_is_bad_input(tmp_path, run_cli):
    path = write(tmp_path, "c.yaml", "base: {model: {preset: tiny}, workload: {seq_len: 64}}\nmatrix: {clusters: [nowhere]}")
    code, _, err = run_cli("campaign", "plan", path)
    assert code == 2 and "unknown cluster 'nowhere'" in err


def test_plan_command_text_and_json(run_cli):
    import json

    code, out, _ = run_cli("campaign", "plan", EXAMPLES / "campaigns" / "tiny.yaml", "--json")
    assert code == 0
    doc = json.loads(out)
    assert doc["points"] == 4 and len(doc["groups"]) == 2 and doc["skipped"] == []
    assert sorted(len(g["points"]) for g in doc["groups"]) == [2, 2]
    point = doc["groups"][0]["points"][0]
    assert point["predicted_ms_per_step"] > 0 and "band" in point and point["measured_links"] is False
    # the budget (issue 49): each point's predicted job, GPU-hours and phases; per group and in total
    every = [p for g in doc["groups"] for p in g["points"]]
    assert all(p["predicted_job_s"] == pytest.approx(sum(p["phases_s"].values()), rel=1e-4) for p in every)
    assert doc["budget"]["points"] == 4
    assert doc["budget"]["gpu_hours"] == pytest.approx(sum(p["gpu_hours"] for p in every), rel=1e-4)
    assert doc["budget"]["job_s"] == pytest.approx(sum(g["budget"]["job_s"] for g in doc["groups"]), rel=1e-4)
    code, out, _ = run_cli("campaign", "plan", EXAMPLES / "campaigns" / "wan14b-720p.yaml")
    assert code == 0 and "27 points in 3 groups" in out and "exceeds the 4 nodes of a100x32" in out
    # the predicted time with its band (issue 35), not the peak-rate "ideal"
    from sporch.orchestrator.plan.cost_constants import fitted_table

    band = f"±{fitted_table()['bands']['*']['compiled']:.0%}"  # A100: no compiled A100 table (follows a refit)
    header = next(line for line in out.splitlines() if " id " in line)
    assert all(h in header for h in ("ms/step", "job", "GPU-h")) and "ideal" not in out and band in out
    assert sum(line.startswith("budget    ") for line in out.splitlines()) == 3
    total = next(line for line in out.splitlines() if line.startswith("total     "))
    assert "27 points:" in total and "GPU-hours" in total
    # where the predictions' link figures come from, once per group's cluster
    links = [row for row in out.splitlines() if row.startswith("links (a100x32): ")]
    assert len(links) == 3 and "none measured: descriptor's intra-node" in links[0], links


# -- references ------------------------------------------------------------------------
def refs(*entries):
    return parse_references([ReferenceSpec(**e) for e in entries], "test")


def test_reference_selection_prefers_the_most_specific():
    rs = refs(
        {"cluster": "*", "metrics": {"step_ms_median": [100.0, -0.1, 0.1, "ms"]}},
        {"cluster": "a100*", "where": {"nodes": 2}, "metrics": {"step_ms_median": [50.0, -0.1, 0.1, "ms"]}},
        {"cluster": "a100x32", "where": {"nodes": 2, "layout": "1x1x2x8"},
         "metrics": {"step_ms_median": [40.0, None, 0.05, "ms"]}},
        {"cluster": "h100x64", "metrics": {"tokens_per_s": [10.0, -0.5, None, "tokens/s"]}},
    )
    point = {"cluster": "a100x32", "nodes": 2, "layout": "1x1x2x8"}
    assert select(rs, point)["step_ms_median"].value == 40.0
    assert select(rs, {**point, "layout": "1x1x1x16"})["step_ms_median"].value == 50.0
    assert select(rs, {**point, "nodes": 1})["step_ms_median"].value == 100.0
    assert "tokens_per_s" not in select(rs, point)
    b = select(rs, point)
    verdicts = evaluate(b, {"step_ms_median": 41.9, "tokens_per_s": 5.0})
    assert verdicts == {"step_ms_median": PASS, "tokens_per_s": NONE}
    assert evaluate(b, {"step_ms_median": 42.1})["step_ms_median"] == FAIL
    assert evaluate(b, {"step_ms_median": 1.0})["step_ms_median"] == PASS  # no lower bound
    assert evaluate(b, {"step_ms_median": None})["step_ms_median"] == FAIL  # missing = fail


@settings(max_examples=100, deadline=None)
@given(st.floats(0.1, 1e6), st.floats(-0.9, 0), st.floats(0, 2), st.floats(0.01, 1e7))
def test_bounds_are_value_times_one_plus_fraction(value, lower, upper, measured):
    (r,) = refs({"metrics": {"tokens_per_s": [value, lower, upper, "tokens/s"]}})
    bound = r.metrics["tokens_per_s"]
    inside = value * (1 + lower) <= measured <= value * (1 + upper)
    assert bound.check(measured) == (PASS if inside else FAIL)


def test_campaign_plan_never_imports_torch(tmp_path):
    import subprocess
    import sys

    probe = ("import sys, io, contextlib\nfrom sporch.orchestrator.cli.main import main\n"
             "with contextlib.redirect_stdout(io.StringIO()):\n"
             f"    code = main(['campaign', 'plan', {str(EXAMPLES / 'campaigns' / 'wan14b-720p.yaml')!r}])\n"
             "print(code, sorted(m for m in sys.modules if m.split('.')[0] == 'torch'))")
    r = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, cwd=tmp_path, check=True)
    assert r.stdout.split() == ["0", "[]"], r.stderr
