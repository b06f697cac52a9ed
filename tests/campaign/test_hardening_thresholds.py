"""Gates that cannot be switched off by accident (issue 32 item 15): a regression threshold of
nan (every comparison with it is false, so nothing is ever worse), inf or a negative one is refused
in one line with exit 2, by ``campaign compare``, ``campaign history`` and ``preflight``, however
it is written (``nan``, ``nan%``, ``inf``, ``-inf%``, ``-1%``)."""

from __future__ import annotations

import pytest

from tests.campaign.test_campaign_report import make_campaign
from tests.campaign.test_history import three_runs

BAD = ["nan", "NaN%", "inf", "inf%", "-inf", "1e999", "-1%", "-0.5"]


def _one_line(code: int, err: str, what) -> None:
    assert code == 2, (what, code, err)
    assert len(err.strip().splitlines()) == 1 and "--threshold" in err and "Traceback" not in err, (what, err)


def test_compare_refuses_a_threshold_that_would_pass_a_10x_slowdown(tmp_path, run_cli):
    a = make_campaign(tmp_path / "a")
    slow = make_campaign(tmp_path / "slow", scale=10.0)
    code, out, _ = run_cli("campaign", "compare", a, slow, "--threshold", "5%")
    assert code == 1 and "+900.0%" in out  # the gate works with a real threshold
    for text in BAD:
        code, out, err = run_cli("campaign", "compare", a, slow, "--threshold", text)
        _one_line(code, err, text)
        assert "must be a finite number >= 0" in err, err


@pytest.mark.parametrize("text", ["nan%", "inf", "-3%"])
def test_history_refuses_them_too(tmp_path, run_cli, history_store, text):
    three_runs(tmp_path, run_cli)
    code, out, err = run_cli("campaign", "history", "--threshold", text)
    _one_line(code, err, text)
    assert "must be a finite number >= 0" in err, err


@pytest.mark.parametrize("text", ["nan", "NaN", "inf"])
def test_preflight_refuses_a_non_finite_threshold(run_cli, text):
    code, out, err = run_cli("preflight", "--cluster", "local", "--local", "--threshold", text)
    assert code == 2 and "--threshold" in err and len(err.strip().splitlines()) == 1, err
    assert ("is not a finite number" if "nan" in text.lower() else "is not in the range") in err, err


def test_clicks_float_range_alone_lets_nan_through():
    """Why preflight needs FiniteRange: nan passes click's bound checks."""
    import click

    from sporch.orchestrator.cli.common import FiniteRange

    assert click.FloatRange(0, 1, min_open=True).convert("nan", None, None) != 0.5  # nan: accepted
    with pytest.raises(click.BadParameter):
        FiniteRange(0, 1, min_open=True).convert("nan", None, None)
