"""result.json's ``step_cache`` (issue 21): an inference run with a step cache records the
steps computed and skipped and every rank's skipped steps; the summary flags ranks of one dp
replica that disagree.

The runs are points on the session's rank pool through the launcher's run_point (on_ranks.py):
they were `sporch run --local` launches; what is asserted is result.json, which run_point writes
alike (test_local_run.py keeps the real launches)."""

from __future__ import annotations

import json

from sporch.orchestrator.contract.results import JobResult
from sporch.orchestrator.contract.step_cache_summary import summarise_step_cache
from sporch.orchestrator.contract.exit_codes import EXIT_OK
from tests.runtime.launch.on_ranks import plan_file, run_point_on_ranks

# threshold 1e9: every step the policy allows is skipped, so the pattern is known in advance:
# step 0 is warm-up, then at most 2 skips in a row, and the last step is always computed
STEPS = 8
COMPUTED, SKIPPED = [0, 3, 6, 7], [1, 2, 4, 5]


def test_an_inference_run_with_a_cache_records_its_steps(tmp_path):
    run_dir = tmp_path / "run"
    plan = plan_file(run_dir, "workload.kind=inference", f"workload.steps={STEPS}", "workload.guidance_scale=4",
                     "parallel.cfg=2", "parallel.ulysses=2", "parallel.ring=1", "workload.cache.method=fbcache",
                     "workload.cache.threshold=1e9", "workload.cache.max_consecutive=2")
    assert run_point_on_ranks(plan, run_dir) == [EXIT_OK] * 4
    result = JobResult.load(run_dir / "result.json")  # the contract reads it back
    cache = result.step_cache
    assert cache["method"] == "fbcache" and cache["threshold"] == 1e9 and cache["max_consecutive"] == 2
    assert (cache["steps_computed"], cache["steps_skipped"]) == (len(COMPUTED), len(SKIPPED))
    assert cache["skipped_by_rank"] == {str(r): SKIPPED for r in range(4)} and cache["ranks_agree"] is True
    assert result.metrics["step_cache"]["computed"] == COMPUTED
    assert len(result.metrics["step_ms"]) == STEPS


def test_without_a_cache_result_json_has_no_step_cache():
    assert summarise_step_cache({0: {"kind": "inference"}, 1: {}}) is None
    assert "step_cache" not in JobResult(status="completed").to_dict()


def _rec(dp, skipped, computed):
    return {"step_cache": {"method": "teacache", "dp_rank": dp, "skipped": skipped, "steps_skipped": len(skipped),
                           "steps_computed": len(computed)}}


def test_summary_counts_each_replica_once_and_flags_disagreeing_ranks():
    ok = summarise_step_cache({0: _rec(0, [1], [0, 2]), 1: _rec(0, [1], [0, 2]), 2: _rec(1, [], [0, 1, 2]),
                               3: _rec(1, [], [0, 1, 2])})
    assert (ok["steps_skipped"], ok["steps_computed"], ok["ranks_agree"]) == (1, 5, True)
    bad = summarise_step_cache({0: _rec(0, [1], [0, 2]), 1: _rec(0, [], [0, 1, 2])})
    assert bad["ranks_agree"] is False and bad["skipped_by_rank"] == {"0": [1], "1": []}
    json.dumps(bad)  # plain JSON


def test_a_generate_run_with_a_cache_records_its_steps(tmp_path):
    """The generate workload (tiny random pipeline, cfg 2 x Ulysses 2): per prompt batch."""
    from tests.testutil import EXAMPLES

    run_dir = tmp_path / "run"
    plan = plan_file(run_dir, f"model.weights={tmp_path / 'pipe'}", "workload.steps=5", "workload.frames=5",
                     "workload.height=32", "workload.width=32", "workload.cache.method=teacache",
                     "workload.cache.threshold=1e9", "workload.cache.max_consecutive=2",
                     job=EXAMPLES / "tiny-generate.yaml")
    assert run_point_on_ranks(plan, run_dir) == [EXIT_OK] * 4
    result = JobResult.load(run_dir / "result.json")
    cache = result.step_cache
    assert (cache["method"], cache["steps_computed"], cache["steps_skipped"]) == ("teacache", 3, 2)
    assert cache["skipped_by_rank"] == {str(r): [[1, 2]] for r in range(4)} and cache["ranks_agree"] is True
    assert result.metrics["step_cache"]["batches"][0]["computed"] == [0, 3, 4]
