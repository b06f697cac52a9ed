"""A filter that matches nothing is an error, not an empty success (issue 51, B and C): a layout
entry's ``gpus`` that no point has, ``campaign compare A B`` with no point completed in both, and
a layout or node count written with a digit that is not an ASCII one (``²``)."""

from __future__ import annotations

import pytest

from tests.campaign.test_hardening_data import cli, one_line_error, synthetic  # noqa: F401 (cli: a fixture)
from tests.testutil import write

BASE = ("base: {model: {preset: tiny}, workload: {kind: benchmark, frames: 9, height: 64, width: 64, "
        "dtype: float32}}\n")


def test_a_layout_entry_whose_gpus_no_point_has_is_refused(tmp_path, run_cli):
    # slurmlab: 2 GPUs a node, nodes [1, 2] -> 2 and 4 GPUs; the gpus: 8 entry would make nothing
    path = write(tmp_path, "c.yaml", BASE + "matrix: {clusters: [slurmlab], nodes: [1, 2], layouts: "
                 "[{ulysses: 2, gpus: 2}, {ring: 4, ulysses: 2, gpus: 8}]}\n")
    code, out, err = run_cli("campaign", "plan", path)
    line = one_line_error(code, err)
    assert "matrix.layouts[1]" in line and "gpus: 8" in line and "2, 4" in line, line
    assert out == ""


def test_a_campaign_whose_layouts_match_no_gpu_count_is_refused(tmp_path, run_cli):
    path = write(tmp_path, "c.yaml", BASE + "matrix: {clusters: [slurmlab], nodes: [1], layouts: "
                 "[{ulysses: 2, gpus: 4}]}\n")
    code, out, err = run_cli("campaign", "plan", path)
    line = one_line_error(code, err)
    assert "matrix.layouts[0]" in line and "gpus: 4" in line, line
    assert "0 points" not in out


def test_every_gpus_entry_matching_some_point_still_plans(tmp_path, run_cli):
    path = write(tmp_path, "c.yaml", BASE + "matrix: {clusters: [slurmlab], nodes: [1, 2], layouts: "
                 "[{ulysses: 2, gpus: 2}, {ring: 2, ulysses: 2, gpus: 4}]}\n")
    code, out, err = run_cli("campaign", "plan", path)
    assert code == 0, err
    assert "2 points" in out


def test_compare_with_no_point_completed_in_both_is_refused(tmp_path, cli):
    a = synthetic(tmp_path / "a", {"p": {}})
    b = synthetic(tmp_path / "b", {"q": {}})
    code, out, err = cli("campaign", "compare", a, b)
    line = one_line_error(code, err)
    assert "no point completed in both" in line and str(a) in line and str(b) in line, line
    assert "no regression" not in out


def test_compare_with_a_point_in_both_still_passes(tmp_path, cli):
    a = synthetic(tmp_path / "a", {"p": {}, "q": {}})
    b = synthetic(tmp_path / "b", {"q": {}})
    code, out, err = cli("campaign", "compare", a, b)
    assert code == 0 and "in 1 point completed in both" in out, out + err


@pytest.mark.parametrize("matrix, key", [
    ("nodes: ['²']", "matrix.nodes"),
    ("layouts: [{ring: '²'}]", "matrix.layouts[0].ring"),
    ("layouts: [{ring: 2, gpus: '²'}]", "matrix.layouts[0].gpus"),
    ("layouts: [{ulysses: '٣'}]", "matrix.layouts[0].ulysses"),
])
def test_a_digit_that_is_not_ascii_is_refused_in_one_line(tmp_path, run_cli, matrix, key):
    path = write(tmp_path, "c.yaml", BASE + f"matrix: {{clusters: [slurmlab], {matrix}}}\n")
    code, _, err = run_cli("campaign", "plan", path)
    line = one_line_error(code, err)
    assert key in line, line
