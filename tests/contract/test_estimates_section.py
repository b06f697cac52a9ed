"""The Plan's typed ``estimates`` section (contract/estimates_section.py): it round-trips through
plan.json with the keys plan.json always had, refuses unknown and missing keys, a schema-2 plan
still loads (the keys older plans lack filled in as the cost model read them) or is refused in one
line, and nothing reads the estimates by string key any more."""

from __future__ import annotations

import dataclasses
import json
import re
from pathlib import Path

import pytest

from sporch.orchestrator.config.cluster import find_cluster
from sporch.orchestrator.config.job import job_from_dict, load_job
from sporch.orchestrator.contract.estimates_section import Estimates, MemoryOption, PipelinePart, PredictedTime
from sporch.orchestrator.contract.plan import SCHEMA_VERSION, Plan
from sporch.orchestrator.plan.cost_inputs import inputs_from_plan
from sporch.orchestrator.plan.plan_prediction import predict_plan
from sporch.orchestrator.plan.planner import make_plan

ROOT = Path(__file__).resolve().parents[2]

#: The keys plan.json's estimates of a benchmark job had before the section was typed (schema 2).
DIT_KEYS = {
    "dtype_bytes", "samples_per_rank", "tokens_per_rank", "text_tokens_per_rank", "all_to_all_bytes_per_rank",
    "ring_bytes_per_rank", "attention_calls_per_step", "comm_bytes_per_rank_per_step", "parameters",
    "token_parameters", "context_flops_per_sample", "parameter_bytes_per_gpu", "parameter_bytes_full",
    "weight_quant", "shard_degree", "parameter_bytes_sharded", "parameter_bytes_gathered",
    "weight_gather_bytes_per_rank_per_step", "weight_gather_gb_per_s", "weight_gather_s_per_step_ideal",
    "activation_bytes_per_gpu", "reserved_bytes_per_gpu", "memory_bytes_per_gpu", "memory_gib_per_gpu",
    "gpu_memory_gib", "memory_fraction", "fits", "flops_per_step_per_rank", "compute_s_per_step_ideal",
    "all_to_all_gb_per_s", "ring_gb_per_s", "all_to_all_s_per_step_ideal", "ring_s_per_step_ideal",
    "shard_weights", "predicted",
}
GENERATE = dict(kind="generate", prompt="a cat", frames=81, height=720, width=1280, steps=40, guidance_scale=4.0,
                dtype="bfloat16")


def _plan(cluster: str, doc: dict) -> Plan:
    return make_plan(find_cluster(cluster), job_from_dict({"name": "est", **doc}))


@pytest.fixture(scope="module")
def plans() -> dict[str, Plan]:
    tiny = {"model": {"preset": "tiny"}, "workload": {"kind": "benchmark", "frames": 5, "height": 32, "width": 64,
                                                      "dtype": "float32", "guidance_scale": 1.0}}
    return {
        "benchmark": _plan("local", {**tiny, "parallel": {"ring": "auto", "ulysses": "auto"}}),
        # two experts, the text encoder and VAE placed, auto's memory options
        "generate": _plan("l40sx8", {"model": {"preset": "wan2.2-t2v-a14b"}, "workload": GENERATE,
                                     "parallel": {"ulysses": 8}}),
        # staging the weights per node
        "staged": make_plan(find_cluster("local"), load_job(ROOT / "examples" / "tiny-generate.yaml",
                                                            ["model.stage=node"])),
    }


def test_the_section_round_trips_with_the_keys_plan_json_always_had(plans):
    bench, gen, staged = plans["benchmark"], plans["generate"], plans["staged"]
    for p in (bench, gen, staged):
        again = Plan.from_json(p.to_json())
        assert again == p and again.schema_version == SCHEMA_VERSION == 4
        assert isinstance(again.estimates, Estimates) and isinstance(again.estimates.predicted, PredictedTime)
    assert set(json.loads(bench.to_json())["estimates"]) == DIT_KEYS | {"layout_choice"}
    assert bench.estimates.layout_choice.startswith("auto chose")
    e = gen.estimates
    assert e.pipeline is not None and e.experts is not None and e.memory.memory_options and e.staging is None
    assert isinstance(e.pipeline.vae, PipelinePart) and isinstance(e.memory.memory_options[0], MemoryOption)
    d = json.loads(gen.to_json())["estimates"]
    assert set(d) == DIT_KEYS | {"pipeline", "experts", "memory_options", "dit_memory_bytes_per_gpu"}
    # the nested objects keep their shape: lists, and an absent size left out (not null)
    assert d["pipeline"]["transformer"] == {"ranks": list(range(8))}
    assert d["memory_options"][0] == dataclasses.asdict(e.memory.memory_options[0])
    assert d["predicted"]["breakdown_s_per_step"]["gemm"] == e.predicted.breakdown_s_per_step.gemm
    assert d["experts"]["count"] == 2 and d["experts"]["switch_s"] == e.experts.switch_s
    st = json.loads(staged.to_json())["estimates"]["staging"]
    assert st == dataclasses.asdict(staged.estimates.staging) and st["nodes"] == 1 and st["bytes"] > 0


def test_unknown_missing_and_misshapen_keys_are_refused(plans):
    d = json.loads(plans["benchmark"].to_json())
    for change, words in (({"flops": 1}, "plan.estimates: unknown key(s) flops"),
                          ({"predicted": {**d["estimates"]["predicted"], "band2": 0}},
                           "plan.estimates.predicted: unknown key(s) band2"),
                          ({"memory_options": {}}, "plan.estimates.memory_options must be a list")):
        bad = {**d, "estimates": {**d["estimates"], **change}}
        with pytest.raises(ValueError, match=re.escape(words)):
            Plan.from_dict(bad)
    est = dict(d["estimates"])
    del est["fits"]
    with pytest.raises(ValueError, match=re.escape("plan.estimates: missing key(s) fits")):
        Plan.from_dict({**d, "estimates": est})
    # a plan built by hand has none, and is written as {}
    bare = dataclasses.replace(plans["benchmark"], estimates=None)
    assert json.loads(bare.to_json())["estimates"] == {} and Plan.from_json(bare.to_json()).estimates is None


def test_a_schema_2_plan_loads_with_the_missing_keys_as_the_cost_model_read_them(plans):
    p = plans["generate"]
    d = json.loads(p.to_json())
    assert Plan.from_dict({**d, "schema_version": 2}) == p  # the same keys: loads as it is
    old = {k: v for k, v in d["estimates"].items()
           if k not in ("token_parameters", "context_flops_per_sample", "text_tokens_per_rank",
                        "weight_gather_bytes_per_rank_per_step", "weight_gather_gb_per_s")}
    loaded = Plan.from_dict({**d, "schema_version": 2, "estimates": old})
    c, w = loaded.estimates.compute, loaded.estimates.weights
    assert loaded.schema_version == SCHEMA_VERSION
    assert c.token_parameters == c.parameters and c.context_flops_per_sample == 0 == c.text_tokens_per_rank
    assert (w.weight_gather_bytes_per_rank_per_step, w.weight_gather_gb_per_s) == (0, 1.0)
    # the cost model sees what it saw of such a plan: every parameter per token, no text keys and values
    x = inputs_from_plan(loaded)
    assert x.gemm_flops > inputs_from_plan(p).gemm_flops and x.gather_bytes == 0
    assert predict_plan(loaded).step_s > predict_plan(p).step_s


def test_an_unreadable_old_plan_is_refused_in_one_line(plans):
    d = json.loads(plans["benchmark"].to_json())
    est = {k: v for k, v in d["estimates"].items() if k != "memory_fraction"}
    with pytest.raises(ValueError) as info:
        Plan.from_dict({**d, "schema_version": 2, "estimates": est})
    msg = str(info.value)
    assert "\n" not in msg and "memory_fraction" in msg and "sporch plan --json" in msg
    with pytest.raises(ValueError, match=r"schema_version 1 is not supported.*sporch plan --json"):
        Plan.from_dict({**d, "schema_version": 1})


def test_nothing_reads_the_estimates_by_string_key():
    """The estimates are read by attribute: no ``estimates[...]`` or ``estimates.get(...)`` in the
    source (plan.json's text may still be read as JSON by a test)."""
    pattern = re.compile(r"estimates(\[|\.get\()")
    found = [f"{path.relative_to(ROOT)}:{n}" for top in ("orchestrator", "runtime", "bench")
             for path in sorted((ROOT / top).rglob("*.py"))
             for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1) if pattern.search(line)]
    assert found == []
