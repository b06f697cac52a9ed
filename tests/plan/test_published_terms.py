"""The compile and eager-host terms of the cost model, fitted to xDiT's Flux.1-dev tables
(orchestrator/plan/data/published.yaml), and the published seconds of a plan's own run.

The H100 defaults of ``compiled_elementwise_bytes``, ``eager_a2a_message_s``,
``eager_ring_layer_s`` and ``ring_step_s`` come from one fit to the eager and the compiled
table together (docs/plan.md, "Published tables"): the fit must give them back, every point
within 12%, and each point left out of the fit predicted within 20%.
"""

from __future__ import annotations

import dataclasses

import pytest

from sporch.orchestrator.config.cluster import find_cluster
from sporch.orchestrator.config.job import load_job
from sporch.orchestrator.contract.plan import Layout
from sporch.orchestrator.plan import published
from sporch.orchestrator.plan.calibration import fit, predicted_s
from sporch.orchestrator.plan.cost import compiles, default_constants, inputs_from_plan, predict
from sporch.orchestrator.plan.planner import make_plan
from tests.testutil import EXAMPLES

FLUX_CASES = ("flux-dev-1024-h100-eager", "flux-dev-1024-h100-compiled")
#: The constants fitted to the two Flux tables together (the H100 row's values came from this fit).
FLUX_FIT = ("compiled_elementwise_bytes", "eager_a2a_message_s", "eager_ring_layer_s", "ring_step_s", "fixed_s")
FLUX_FIT_ERROR = 0.12
LEAVE_ONE_OUT_ERROR = 0.20


@pytest.fixture(scope="module")
def flux_obs():
    return [o for name in FLUX_CASES for o in published.observations(published.case(name))]


def test_every_case_says_whether_it_compiled():
    for c in published.cases():
        assert isinstance(c.get("compile"), bool), c["name"]
    assert [published.case(n)["compile"] for n in FLUX_CASES] == [False, True]


def test_the_flux_fit_gives_back_the_h100_defaults(flux_obs):
    base = default_constants("H100")
    result = fit(flux_obs, base, FLUX_FIT)
    for k in FLUX_FIT[:-1]:  # fixed_s stays 0 in the table: per-job costs belong to the pipeline, not the GPU
        assert result.constants[k] == pytest.approx(base[k], rel=0.02), k
    assert result.max_relative_error < FLUX_FIT_ERROR, [f"{o.label}: {e:+.1%}" for o, e in
                                                        zip(flux_obs, result.relative_errors)]


def test_each_flux_point_left_out_is_predicted(flux_obs):
    base = default_constants("H100")
    for i, held in enumerate(flux_obs):
        result = fit(flux_obs[:i] + flux_obs[i + 1:], base, FLUX_FIT)
        err = predicted_s(held, result.constants) / held.measured_s - 1
        assert abs(err) < LEAVE_ONE_OUT_ERROR, (i, held.label, err)


def test_without_the_new_terms_the_flux_tables_are_out_of_order(flux_obs):
    """The control: with the compile and eager-host terms off (the model before them), the
    defaults misorder pairs of the Flux tables more than 10% apart."""
    base = default_constants("H100")
    old = {**base, "compiled_elementwise_bytes": base["elementwise_bytes"], "eager_a2a_message_s": 0.0,
           "eager_ring_layer_s": 0.0, "ring_step_s": 0.0}
    wrong = [(a.label, b.label) for a in flux_obs for b in flux_obs
             if a.inputs.compiled == b.inputs.compiled and a.measured_s < b.measured_s * 0.9
             and not predicted_s(a, old) < predicted_s(b, old)]
    assert wrong


def test_eager_host_terms_only_for_eager_runs_and_compiled_glue_only_compiled():
    job = EXAMPLES / "wan14b-720p.yaml"
    cluster = find_cluster("h100x64")
    eager = make_plan(cluster, load_job(job, ["workload.compile=false", "parallel.ring=2", "parallel.ulysses=4",
                                              "resources.nodes=1", "parallel.shard_weights=none"]))
    compiled = make_plan(cluster, load_job(job, ["workload.compile=true", "parallel.ring=2", "parallel.ulysses=4",
                                                 "resources.nodes=1", "parallel.shard_weights=none"]))
    assert not compiles(eager) and compiles(compiled)
    c = default_constants("H100")
    pe, pc = predict(inputs_from_plan(eager), c), predict(inputs_from_plan(compiled), c)
    L = eager.estimates["attention_calls_per_step"]
    assert pe.eager_host == pytest.approx(L * (2 * 3 * c["eager_a2a_message_s"] + c["eager_ring_layer_s"]))
    assert pc.eager_host == 0.0
    assert pc.elementwise == pytest.approx(pe.elementwise * c["compiled_elementwise_bytes"] / c["elementwise_bytes"])
    # a sharded model is not compiled by the runtime, so the model predicts it eager
    sharded = make_plan(cluster, load_job(job, ["workload.compile=true", "parallel.shard_weights=sequence"]))
    assert not compiles(sharded)


def test_a_plan_of_a_published_run_finds_its_published_seconds():
    c = published.case("flux-dev-1024-h100-eager")
    plan = published.plan_case(c, Layout(1, 1, 2, 2))
    assert published.published_seconds(plan) == ("flux-dev-1024-h100-eager", 5.19)
    compiled = published.plan_case(published.case("flux-dev-1024-h100-compiled"), Layout(1, 1, 1, 4))
    assert published.published_seconds(compiled) == ("flux-dev-1024-h100-compiled", 1.63)
    # another layout or step count is no published run
    assert published.published_seconds(published.plan_case(c, Layout(1, 1, 2, 4))) is None
    other = dataclasses.replace(plan, workload=dataclasses.replace(plan.workload, steps=20))
    assert published.published_seconds(other) is None
    # the same layout compiled is the compiled table's run
    assert published.published_seconds(dataclasses.replace(
        plan, workload=dataclasses.replace(plan.workload, compile=True))) == ("flux-dev-1024-h100-compiled", 1.8)
