"""``workload.cache`` (issue 21): bad keys are one-line errors (exit 2, nothing written), and a
good one reaches the Plan's ``workload.cache`` section."""

from __future__ import annotations

import json

import pytest

from tests.cli.test_bad_input_hardening import in_tmp, one_line_error  # noqa: F401  (fixture)
from tests.testutil import EXAMPLES

TINY = EXAMPLES / "tiny.yaml"
GENERATE = EXAMPLES / "tiny-generate.yaml"
FB = "workload.cache.method=fbcache"
INF = "workload.kind=inference"  # tiny.yaml verifies


@pytest.mark.parametrize("job,overrides,needle", [
    (TINY, ["workload.cache.method=deepcache"], "'workload.cache.method' must be one of none, fbcache, teacache"),
    (TINY, [INF, FB], "'workload.cache.threshold' is required with method fbcache"),
    (TINY, [INF, FB, "workload.cache.threshold=-0.1"], "'workload.cache.threshold' must be >= 0"),
    (TINY, [INF, FB, "workload.cache.threshold=0.1", "workload.cache.warmup_steps=-1"],
     "'workload.cache.warmup_steps' must be >= 0"),
    (TINY, [INF, FB, "workload.cache.threshold=0.1", "workload.cache.max_consecutive=-2"],
     "'workload.cache.max_consecutive' must be >= 0"),
    (TINY, [FB, "workload.cache.threshold=0.1", "workload.kind=benchmark"], "'workload.cache' skips denoising steps"),
    (TINY, ["workload.cache.bogus=1"], "bogus"),
    (TINY, [INF, "workload.cache.method=taylorseer"], "'workload.cache.interval' taylorseer computes the blocks"),
    (TINY, [INF, "workload.cache.method=taylorseer", "workload.cache.interval=3", "workload.cache.order=4"],
     "'workload.cache.order' must be 1 or 2"),
    (TINY, [INF, "workload.cache.method=taylorseer", "workload.cache.interval=3", "workload.cache.threshold=0.1"],
     "'workload.cache.threshold' is not used by taylorseer"),
    (TINY, [INF, FB, "workload.cache.threshold=0.1", "workload.cache.interval=3"],
     "'workload.cache.interval' is not used by fbcache"),
    (TINY, [INF, "workload.cache.method=magcache", "workload.cache.threshold=0.1"],
     "workload.cache.method=magcache needs the model's magnitude ratios"),
    (TINY, [INF, "workload.cache.method=magcache", "workload.cache.threshold=0.1", "workload.cache.ratios=[1.0,-2]"],
     "'workload.cache.ratios' must be a list of positive numbers"),
])
def test_bad_cache_keys_are_one_line_errors(run_cli, in_tmp, job, overrides, needle):  # noqa: F811
    code, out, err = run_cli("plan", "--cluster", "local", job, *overrides)
    one_line_error(code, out, err, needle)
    assert list(in_tmp.iterdir()) == []


def test_a_cache_reaches_the_plan(run_cli, in_tmp):  # noqa: F811
    code, out, err = run_cli("plan", "--cluster", "local", "--json", GENERATE, "workload.cache.method=teacache",
                             "workload.cache.threshold=0.2", "workload.cache.max_consecutive=2")
    assert code == 0, err
    cache = json.loads(out)["workload"]["cache"]
    assert cache == {"method": "teacache", "threshold": 0.2, "warmup_steps": 1, "max_consecutive": 2,
                     "interval": 0, "order": 1, "ratios": None}
    code, out, err = run_cli("plan", "--cluster", "local", "--json", GENERATE)
    assert code == 0 and json.loads(out)["workload"]["cache"] is None


def test_new_caches_reach_the_plan(run_cli, in_tmp):  # noqa: F811
    code, out, err = run_cli("plan", "--cluster", "local", "--json", GENERATE, "workload.cache.method=taylorseer",
                             "workload.cache.interval=3", "workload.cache.order=2")
    assert code == 0, err
    cache = json.loads(out)["workload"]["cache"]
    assert (cache["method"], cache["interval"], cache["order"], cache["ratios"]) == ("taylorseer", 3, 2, None)
    code, out, err = run_cli("plan", "--cluster", "local", "--json", GENERATE, "workload.cache.method=magcache",
                             "workload.cache.threshold=0.2", "workload.cache.ratios=[1.0,0.9,0.95]")
    assert code == 0, err
    assert json.loads(out)["workload"]["cache"]["ratios"] == [1.0, 0.9, 0.95]
