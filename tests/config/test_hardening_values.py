"""Values that used to pass (issue 24, item 13) are refused with one line and exit 2: calibration
constants whose prediction is infinite (``plan --json`` wrote ``Infinity``, which strict JSON parsers
reject), a campaign matrix of a billion points, an empty prompt, a billion frames per second."""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from sporch.orchestrator.cli.common import json_text
from sporch.orchestrator.errors import SporchError

REPO = Path(__file__).resolve().parents[2]
TINY = REPO / "examples" / "tiny.yaml"
TINY_GENERATE = REPO / "examples" / "tiny-generate.yaml"


def sporch(*args: str, cwd: Path = REPO) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "sporch.orchestrator.cli.main", *map(str, args)], cwd=cwd,
                          text=True, capture_output=True, timeout=120, env={**os.environ})


def _refused(proc: subprocess.CompletedProcess, *words: str) -> None:
    assert proc.returncode == 2, proc.stdout + proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("sporch: error:"), proc.stderr
    for w in words:
        assert w in lines[0], lines[0]
    assert "Traceback" not in proc.stderr and "Infinity" not in proc.stdout


def _cluster_with(tmp_path: Path, **constants) -> Path:
    doc = yaml.safe_load((REPO / "clusters" / "local.yaml").read_text())
    doc["calibration_constants"] = constants
    path = tmp_path / "extreme.yaml"
    path.write_text(yaml.safe_dump(doc))
    return path


@pytest.mark.parametrize("constants", [{"layer_overhead_s": 1e308}, {"fixed_s": 1e308, "a2a_latency_s": 1e308}])
def test_plan_refuses_constants_that_predict_an_infinite_time(tmp_path, constants):
    cluster = _cluster_with(tmp_path, **constants)
    for args in ((), ("--json",), ("--rank", "--json")):
        proc = sporch("plan", "--cluster", cluster, TINY, *args)
        _refused(proc, "constants", "inf")


def test_plan_json_of_sane_constants_is_strict_json(tmp_path):
    proc = sporch("plan", "--cluster", _cluster_with(tmp_path, layer_overhead_s=1e-4), TINY, "--json")
    assert proc.returncode == 0, proc.stderr
    json.loads(proc.stdout, parse_constant=lambda c: pytest.fail(f"non-finite {c} in plan --json"))


def test_json_text_refuses_non_finite_numbers_naming_them():
    assert json.loads(json_text({"a": [1.5]})) == {"a": [1.5]}
    for bad in (math.inf, -math.inf, math.nan):
        with pytest.raises(SporchError, match=r"estimates\.predicted\.step_s = (inf|-inf|nan)"):
            json_text({"estimates": {"predicted": {"step_s": bad}}})


def _campaign(tmp_path: Path, **matrix) -> Path:
    doc = {"name": "big", "output_dir": str(tmp_path / "out"),
           "base": {"model": {"preset": "tiny"}, "workload": {"kind": "benchmark", "seq_len": 64}},
           "matrix": {"clusters": ["local"], **matrix}}
    path = tmp_path / "big.yaml"
    path.write_text(json.dumps(doc))
    return path


def test_campaign_plan_refuses_a_billion_repeats(tmp_path):
    _refused(sporch("campaign", "plan", _campaign(tmp_path, repeats=1_000_000_000)), "1000000000", "10000")


def test_campaign_plan_refuses_a_matrix_of_too_many_points(tmp_path):
    proc = sporch("campaign", "plan", _campaign(tmp_path, repeats=2000, dtypes=["float32", "bfloat16"],
                                                nodes=[1, 2, 3]))
    _refused(proc, "12000 points", "10000")


def test_campaign_plan_refuses_more_points_than_the_bound_from_named_axes(tmp_path):
    from sporch.orchestrator.campaign.expand import expand
    from sporch.orchestrator.campaign.spec import load_campaign

    camp = load_campaign(_campaign(tmp_path, repeats=9000, layouts="all"))  # 9000 x (several layouts)
    with pytest.raises(SporchError, match="more than 10000 points"):
        expand(camp)


@pytest.mark.parametrize("prompt", ["", "   ", "\t\n"])
def test_plan_refuses_an_empty_prompt(tmp_path, prompt):
    doc = yaml.safe_load(TINY_GENERATE.read_text())
    doc["workload"]["prompt"] = prompt
    job = tmp_path / "job.yaml"
    job.write_text(json.dumps(doc))
    _refused(sporch("plan", "--cluster", "local", job), "workload.prompt", "empty")


@pytest.mark.parametrize("fps", ["1000000000", "0", "241"])
def test_plan_refuses_an_fps_out_of_range(fps):
    _refused(sporch("plan", "--cluster", "local", TINY_GENERATE, f"workload.fps={fps}"), "workload.fps", "1..240")


@pytest.mark.parametrize("fps", ["1", "240"])
def test_plan_takes_an_fps_in_range(fps):
    proc = sporch("plan", "--cluster", "local", TINY_GENERATE, f"workload.fps={fps}", "--json")
    assert proc.returncode == 0, proc.stderr
