"""Leave-one-table-out validation of the cost model (orchestrator/plan/validation.py): each
published table predicted by a fit to all the others. The figures reached (docs/plan.md) must
not regress: per table, the pairs ordered rightly at least as many, the largest ratio error
against the table's fastest point at most the reached one + MARGIN."""

from __future__ import annotations

import pytest

from sporch.orchestrator.contract.plan import Layout
from sporch.orchestrator.plan import published
from sporch.orchestrator.plan.calibration import Observation
from sporch.orchestrator.plan.cost_constants import default_constants, fitted_table, prior_constants
from sporch.orchestrator.plan.validation import all_tables_fit, bands, score

MARGIN = 0.03
#: table -> (pairs ordered rightly, pairs measured > 10% apart, largest held-out ratio error)
REACHED = {
    "hunyuanvideo-720p-h100": (6, 6, 0.187),
    "hunyuanvideo-720p-h20": (6, 6, 0.006),
    "hunyuanvideo-720p-l20": (3, 3, 0.186),
    "hunyuanvideo-960-h100": (6, 6, 0.179),
    "hunyuanvideo-960-h20": (6, 6, 0.005),
    "hunyuanvideo-960-l20": (3, 3, 0.022),
    "consisid-480p-h100": (53, 54, 0.211),
    "flux-dev-1024-h100-eager": (9, 11, 0.198),
    "flux-dev-1024-h100x8-xdit-issue416": (2, 3, 0.208),
    "flux-dev-1024-h100-compiled": (12, 12, 0.110),
    "wan21-t2v-14b-720p-h800": (6, 6, 0.166),
    "wan21-t2v-14b-720p-a800": (6, 6, 0.127),
    "wan21-t2v-14b-720p-h20": (6, 6, 0.056),
    "wan21-t2v-1.3b-480p-rtx4090": (5, 5, 0.097),
    "flux-dev-1024-l20-diffusers": (2, 2, 0.134),
    "flux-dev-1024-rtx4090-diffusers": (2, 2, 0.167),
    "flux-dev-h20-xdit-eager": (1, 1, 0.095),
    "flux-dev-h20-xdit-compiled": (1, 1, 0.191),
    "flux-dev-1024-h100-cachedit": (1, 1, 0.035),
}


# held_out: tests/plan/conftest.py (one leave-one-table-out for this file and test_predict_cmd.py)


def test_every_checked_table_is_validated(held_out):
    assert sorted(held_out) == sorted(c["name"] for c in published.checked_cases()) == sorted(REACHED)


@pytest.mark.parametrize("name", sorted(REACHED))
def test_held_out_figures_do_not_regress(name, held_out):
    ordered, pairs, err = REACHED[name]
    s = held_out[name]
    assert s.pairs == pairs
    assert s.ordered >= ordered, (name, s.ordered, pairs)
    assert s.max_ratio_error <= err + MARGIN, (name, s.max_ratio_error, [(r.layout, r.ratio_error) for r in s.rows])


def test_the_shipped_defaults_are_the_fit_to_all_tables():
    fit = all_tables_fit()
    for model in ("H100-SXM5-80GB", "L20-48GB", "RTX-4090", "H20"):
        assert default_constants(model) == pytest.approx(fit.constants(prior_constants(model)), rel=2e-3), model
    # the cpu row (gloo ranks) is not the GPUs' fit
    assert default_constants("cpu") == prior_constants("cpu")


def test_the_shipped_bands_are_the_held_out_errors(held_out):
    """data/fitted.yaml's bands (what `sporch plan` shows) are this validation's: regenerate them
    with `python bench/published_validation.py --write-fit` when the model or the tables change."""
    assert fitted_table()["bands"] == bands(list(held_out.values()))
    assert fitted_table()["bands"]["H100"]["compiled"] == pytest.approx(REACHED["flux-dev-1024-h100-compiled"][2], abs=0.005)


def test_score_counts_pairs_and_ratio_errors():
    case = {"name": "t", "gpu": {"model": "H100"}, "compile": False}
    x = published.observations(published.case("flux-dev-1024-h100-cachedit"))[0].inputs
    obs = [Observation(x, 1.0, "job", "a"), Observation(x, 2.0, "job", "b"), Observation(x, 2.05, "job", "c")]
    s = score(case, obs, [1.0, 3.0, 1.5])
    # pairs over 10% apart: (a, b), (a, c); both ordered; b vs c is a tie (2.5% apart), not asked
    assert (s.pairs, s.ordered) == (2, 2)
    # ratios to the fastest (a): b measured 2, predicted 3 (+50%); c 2.05 vs 1.5 (-27%)
    assert s.max_ratio_error == pytest.approx(0.5)
    assert [r.ratio_error for r in s.rows] == pytest.approx([0.0, 0.5, 1.5 / 2.05 - 1])
    wrong = score(case, obs, [2.5, 2.0, 3.0])
    assert (wrong.pairs, wrong.ordered) == (2, 1)


def test_a_sharded_published_point_is_planned_sharded():
    c = published.case("wan21-t2v-1.3b-480p-rtx4090")
    plan = published.plan_case(c, Layout(1, 1, 1, 4), shard_weights="sequence")
    assert plan.placement.shard_weights == "sequence"
    assert published.observations(c)[2].inputs.gather_bytes > 0 and published.observations(c)[0].inputs.gather_bytes == 0


def test_end_to_end_tables_are_judged_end_to_end(held_out):
    """Issue 49: a table of whole generations is predicted with its phases (encode, steps,
    decode) and beside it by the same fit's steps alone; a table of step times has no phases."""
    e2e = {n for n, s in held_out.items() if s.end_to_end}
    assert e2e == {c["name"] for c in published.checked_cases() if published.level(c) == "job"}
    for name in e2e:
        s = held_out[name]
        assert 0 <= s.phase_share < 1 and s.explained == pytest.approx(s.denoise_only_error - s.max_ratio_error)
    # Wan2.1-1.3B on RTX 4090: its 8-GPU row (112 s) barely beats its 4-GPU one (121 s); the steps
    # alone cannot say why (a 4-to-8 speed-up that is not there), the phases that do not shrink can
    wan = held_out["wan21-t2v-1.3b-480p-rtx4090"]
    assert wan.denoise_only_error > 1.0 and wan.max_ratio_error < 0.2 and wan.phase_share > 0.5
    for name in ("flux-dev-1024-l20-diffusers", "flux-dev-1024-rtx4090-diffusers"):  # ms per step
        assert not held_out[name].end_to_end and held_out[name].to_dict().get("end_to_end") is None


def test_published_rows_say_where_the_text_encoder_ran():
    """Wan's --t5_cpu (one RTX 4090) and --t5_fsdp (the rest): the observation's encode phase is
    the host's, or the sequence group's with the encoder's gathers; each table's pipeline is its
    preset's (HunyuanVideo's Llama encoder for the hunyuanvideo tables)."""
    from sporch.orchestrator.plan.cost import predict

    obs = published.observations(published.case("wan21-t2v-1.3b-480p-rtx4090"))
    phases = [o.inputs.phases for o in obs]
    assert [p.encoder_placement for p in phases] == ["cpu", "sharded", "sharded", "sharded"]
    assert [p.encode_degree for p in phases] == [1, 2, 4, 8]
    consts = default_constants("RTX-4090")
    cpu, gpu = (predict(o.inputs, consts).phase("encode") for o in obs[:2])
    assert cpu > 10 * gpu  # 5.7 B parameters x 512 tokens x 2 prompts on the host: seconds
    hunyuan = published.observations(published.case("hunyuanvideo-720p-h100"))[0].inputs.phases
    assert hunyuan.encode_flops == pytest.approx(2 * 7_628_247_296 * 256, rel=1e-9)  # no CFG: one prompt
