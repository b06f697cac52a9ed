"""Step caches on the generic path, planner side (torch-free): every method plans on every family
(SD3's class, without diffusers' cache contexts, included), a method a family does not list is
refused in one line naming what its classes miss (and ``sporch models`` says so), and the MagCache
refusal's pointer (result.json ``step_cache.changes``) is where a measuring run's ratios are."""

from __future__ import annotations

import dataclasses

import pytest

from sporch.orchestrator.contract.step_cache_summary import summarise_step_cache
from sporch.orchestrator.errors import SporchError
from sporch.orchestrator.models.families import get_family
from sporch.orchestrator.plan.family_table import cache_refusal
from sporch.orchestrator.plan.family_checks import check_family_cache
from tests.plan.test_families import VERIFY, folder, plan
from tests.plan.test_generic_levers_plan import SD3

GENERATE = {**VERIFY, "kind": "generate", "prompt": "a cat"}


@pytest.mark.parametrize("cache", [
    {"method": "fbcache", "threshold": 0.1},
    {"method": "teacache", "threshold": 0.2, "warmup_steps": 2, "max_consecutive": 2},
    {"method": "taylorseer", "interval": 3, "order": 2},
    {"method": "magcache", "threshold": 0.0},
    {"method": "magcache", "threshold": 0.1, "ratios": [1.0, 0.98, 0.97]},
], ids=lambda c: c["method"] + ("-ratios" if "ratios" in c else ""))
def test_every_cache_plans_on_sd3_whose_class_has_no_cache_contexts(tmp_path, cache):
    p = plan({"weights": str(folder(tmp_path, SD3)), "text_len": 7}, {**GENERATE, "cache": cache},
             parallel={"ulysses": 2, "ring": 2})
    assert p.model.diffusers_class == "SD3Transformer2DModel" and p.workload.cache.method == cache["method"]
    assert p.workload.cache.ratios == cache.get("ratios")


def test_a_method_a_family_does_not_list_is_one_line_naming_what_is_missing():
    family = dataclasses.replace(get_family("sd3"), step_cache=("fbcache",),
                                 step_cache_refusal="its head block has no time embedding for TeaCache's probe")
    with pytest.raises(SporchError) as exc:
        check_family_cache("teacache", family, "SD3Transformer2DModel (family sd3, the generic path)")
    msg = str(exc.value)
    assert "\n" not in msg and msg.startswith("workload.cache.method=teacache is not built for SD3Transformer2DModel")
    assert "(its head block has no time embedding for TeaCache's probe); use fbcache or none" in msg
    check_family_cache("fbcache", family, "x")  # listed: planned
    check_family_cache("none", family, "x")
    assert cache_refusal(family) == ("not teacache, taylorseer, magcache: its head block has no time embedding "
                                      "for TeaCache's probe")
    assert cache_refusal(get_family("pixart")) == ""


def test_result_json_step_cache_changes_are_the_first_batchs():
    """The MagCache refusal says to read the ratios from result.json ``step_cache.changes``: a
    generate's (per context; the first context's) and an inference run's."""
    generic = {"method": "magcache", "dp_rank": 0, "skipped": [{"cond": [], "uncond": []}],
               "steps_computed": 6, "steps_skipped": 0,
               "batches": [{"batch": 0, "computed": [0, 1, 2], "skipped": [], "changes": [1.0, 0.97, 0.95],
                            "contexts": {"cond": {"changes": [1.0, 0.97, 0.95]}, "uncond": {"changes": [1.0, 0.9, 0.9]}}},
                           {"batch": 1, "changes": [1.0, 0.5, 0.5]}]}
    assert summarise_step_cache({0: {"step_cache": generic}, 1: {"step_cache": generic}})["changes"] == [1.0, 0.97, 0.95]
    inference = {"method": "magcache", "skipped": [], "changes": [1.0, 1.1], "steps_computed": 2, "steps_skipped": 0}
    assert summarise_step_cache({0: {"step_cache": inference}})["changes"] == [1.0, 1.1]


def test_magcache_without_ratios_is_refused_with_where_a_measuring_run_puts_them(tmp_path):
    with pytest.raises(SporchError, match=r"run once with workload\.cache\.threshold=0 \(it measures them: result\.json "
                                          r"step_cache\.changes\) and give them as workload\.cache\.ratios") as exc:
        plan({"weights": str(folder(tmp_path, SD3)), "text_len": 7},
             {**GENERATE, "cache": {"method": "magcache", "threshold": 0.1}}, parallel={"ulysses": 4})
    assert "\n" not in str(exc.value)
