"""The compile and eager-host terms of the cost model and the published seconds of a plan's own
run (orchestrator/plan/data/published.yaml). How well the terms carry from table to table is
tests/plan/test_validation.py's."""

from __future__ import annotations

import dataclasses

import pytest

from sporch.orchestrator.config.cluster import find_cluster
from sporch.orchestrator.config.job import load_job
from sporch.orchestrator.contract.plan import Layout
from sporch.orchestrator.plan import published
from sporch.orchestrator.plan.calibration import fit, predicted_s
from sporch.orchestrator.plan.cost import predict
from sporch.orchestrator.plan.cost_constants import default_constants
from sporch.orchestrator.plan.cost_inputs import compiles, inputs_from_plan
from sporch.orchestrator.plan.planner import make_plan
from tests.testutil import EXAMPLES

FLUX_CASES = ("flux-dev-1024-h100-eager", "flux-dev-1024-h100-compiled")


def test_every_case_says_whether_it_compiled():
    for c in published.cases():
        assert isinstance(c.get("compile"), bool), c["name"]
    assert [published.case(n)["compile"] for n in FLUX_CASES] == [False, True]


def test_eager_host_terms_only_for_eager_runs_and_compiled_glue_only_compiled():
    job = EXAMPLES / "wan14b-720p.yaml"
    cluster = find_cluster("h100x64")
    eager = make_plan(cluster, load_job(job, ["workload.compile=false", "parallel.ring=2", "parallel.ulysses=4",
                                              "resources.nodes=1", "parallel.shard_weights=none"]))
    compiled = make_plan(cluster, load_job(job, ["workload.compile=true", "parallel.ring=2", "parallel.ulysses=4",
                                                 "resources.nodes=1", "parallel.shard_weights=none"]))
    assert not compiles(eager) and compiles(compiled)
    c = {**default_constants("H100"), "eager_layer_s": 0.5, "eager_a2a_message_s": 1e-3, "eager_ring_layer_s": 2e-3}
    pe, pc = predict(inputs_from_plan(eager), c), predict(inputs_from_plan(compiled), c)
    L = eager.estimates.compute.attention_calls_per_step
    # an eager layer takes the longer of the host's launches and the GPU's work
    host = c["eager_layer_s"] + 2 * 3 * c["eager_a2a_message_s"] + c["eager_ring_layer_s"]
    gpu = (pe.step_s - pe.eager_host) / L
    assert pe.host_bound and pe.eager_host == pytest.approx(L * (host - gpu)) and pe.step_s == pytest.approx(L * host)
    # an eager ring step costs eager_ring_step_s more on the GPU than a compiled one, per layer
    step = {**c, "eager_layer_s": 0.0, "eager_ring_step_s": 4e-4}
    ge, gc = predict(inputs_from_plan(eager), step), predict(inputs_from_plan(compiled), step)
    assert ge.ring_merge - gc.ring_merge == pytest.approx(L * (2 - 1) * 4e-4)
    quiet = predict(inputs_from_plan(eager), {**c, "eager_layer_s": 0.0})
    assert not quiet.host_bound and quiet.eager_host == 0.0
    assert pc.eager_host == 0.0 and not pc.host_bound
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
