"""The cost model's absolute step times against sporch's own measured steps (plan/absolute_check.py,
data/measured_steps.yaml): data/fitted.yaml's ``absolute`` is what the check gives now, and the
prediction `sporch plan` prints carries it."""

from __future__ import annotations

import pytest

from sporch.orchestrator.plan.absolute_check import MeasuredStep, measured_steps, ranges
from sporch.orchestrator.plan.cost_band import prediction_band
from sporch.orchestrator.plan.cost_constants import fitted_table


@pytest.fixture(scope="module")
def points():
    return measured_steps()


def test_the_shipped_absolute_ranges_are_the_measured_errors(points):
    """Regenerate with `python bench/published_validation.py --write-fit` when the cost model, the
    fit or the measured steps change."""
    assert fitted_table()["absolute"] == ranges(points)


def test_every_point_is_planned_as_its_run(points):
    assert len(points) == 8 and {p.runtime for p in points} == {"sporch", "diffusers"}
    assert {p.gpu_row for p in points} == {"H100"}
    wan = {p.name: p for p in points if p.name.startswith("wan2.1-1.3b")}
    # compiled predicted faster than eager on the same shape (the eager host terms and unfused glue)
    assert wan["wan2.1-1.3b-480p-sporch-compiled"].predicted_s < wan["wan2.1-1.3b-480p-sporch-eager"].predicted_s
    assert all(p.predicted_s > 0 and p.measured_s > 0 for p in points)


def test_ranges_take_sporchs_points_only_per_row_and_mode():
    def pt(runtime, compiled, measured, predicted=1.0, row="H100"):
        return MeasuredStep("p", runtime, row, compiled, measured, predicted, "cmd")

    got = ranges([pt("sporch", False, 1.2), pt("sporch", False, 0.9), pt("sporch", True, 1.5),
                  pt("diffusers", True, 3.0), pt("sporch", True, 1.1, row="H20")])
    assert got == {"H100": {"eager": [-0.1, 0.2], "compiled": [0.5, 0.5]}, "H20": {"compiled": [0.1, 0.1]}}


def test_the_band_text_names_the_measured_range_only_where_there_is_one():
    lo, hi = fitted_table()["absolute"]["H100"]["eager"]
    assert prediction_band("H100-SXM5-80GB", False)[1].endswith(
        f"; sporch's measured H100 eager steps {lo:+.0%}..{hi:+.0%} vs predicted")
    assert "measured" not in prediction_band("L20-48GB", False)[1]
