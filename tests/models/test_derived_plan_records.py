"""The torch-free side of derived split plans: their records and JSON (plan_format.py,
derived_plans.py), the cache folder, the RoPE and head rules a family checks at plan time
(rope_rules.py), and the planner refusing a class whose cached verdict is not exact."""

from __future__ import annotations

import json
import math

import pytest

from sporch.orchestrator.models.checkpoint_config import read_checkpoint_model
from sporch.orchestrator.models.checkpoint_files import CheckpointError
from sporch.orchestrator.models.families import FAMILIES, get_family
from sporch.orchestrator.models.families.derived_plans import (DERIVE_VERSION, PlanVerdict, cache_dir, read_verdict,
                                                               verdict_path, verdict_report, write_verdict)
from sporch.orchestrator.models.families.plan_format import (GatherOutput, SplitInput, entries, from_json, splits_text,
                                                             to_json)
from sporch.orchestrator.models.families.rope_rules import ClassRuleError, head_width, heads_per_kv_head, rope_axes
from tests.cli.test_bad_input_hardening import one_line_error

#: a plan with every kind of entry: an output split, a tuple input, segments, a text mark, a tuple gather
PLAN = {"rope": {0: SplitInput(0, 2, split_output=True), 1: SplitInput(0, 2, split_output=True)},
        "blocks.0": {"hidden_states": SplitInput(1, 3), "encoder_hidden_states": SplitInput(1, 3)},
        "blocks.*": {"mask": SplitInput(3, 4, segments=("hidden_states", "encoder_hidden_states")),
                     "freqs": (SplitInput(0, 2), SplitInput(0, 2))},
        "layers.*": {"joint": SplitInput(1, 3, text=True)},
        "blocks.3": (None, GatherOutput(1, 3)), "proj_out": GatherOutput(1, 3)}
LUMINA = {"_class_name": "Lumina2Transformer2DModel", "hidden_size": 32, "num_layers": 2, "num_refiner_layers": 1,
          "num_attention_heads": 4, "num_kv_heads": 2, "multiple_of": 16, "axes_dim_rope": [2, 2, 4],
          "axes_lens": [32, 32, 32], "cap_feat_dim": 16, "in_channels": 4, "patch_size": 2, "sample_size": 16}


@pytest.mark.parametrize("plan", [PLAN] + [p for f in FAMILIES for p in f.split_plans.values()])
def test_a_plan_survives_json(plan):
    assert from_json(json.loads(json.dumps(to_json(plan)))) == plan


def test_text_carried_under_another_name_is_text_split():
    assert splits_text({"layers.0": {"hidden_states": SplitInput(1, 3, text=True)}})
    assert not splits_text({"layers.0": {"hidden_states": SplitInput(1, 3)}})
    assert entries({"x.*": {"m": SplitInput(3, 4, segments=("a", "b"))}}) == ["split x.*: m (dim 3 of 4 as segments a + b)"]


def test_a_verdict_survives_json_and_refuses_in_one_line(tmp_path):
    v = PlanVerdict("FooTransformer2DModel", "9.9", exact=False, plan=PLAN, errors={2: 1e-7, 4: math.inf},
                    abs_errors={2: 1e-7, 4: math.inf}, reason="why", stack=("blocks",), tokens=(15, 6))
    write_verdict(v, tmp_path)
    assert read_verdict("FooTransformer2DModel", "9.9", tmp_path) == v
    line = v.refusal()
    assert "\n" not in line and line.startswith("FooTransformer2DModel:") and "not finite on 4 sequence ranks" in line
    none = PlanVerdict("FooTransformer2DModel", "9.9", exact=False, plan=None, reason="nothing fits")
    assert none.refusal().startswith("FooTransformer2DModel: no split plan could be derived") and "nothing fits" in none.refusal()


def test_a_verdict_of_another_derivation_or_a_broken_file_is_derived_again(tmp_path):
    v = PlanVerdict("FooTransformer2DModel", "9.9", exact=True, plan=PLAN, errors={2: 1e-7, 4: 1e-7})
    path = write_verdict(v, tmp_path)
    old = json.loads(path.read_text())
    path.write_text(json.dumps({**old, "version": DERIVE_VERSION - 1}))
    assert read_verdict("FooTransformer2DModel", "9.9", tmp_path) is None
    path.write_text("{ not json")
    assert read_verdict("FooTransformer2DModel", "9.9", tmp_path) is None
    assert read_verdict("BarTransformer2DModel", "9.9", tmp_path) is None


def test_the_cache_folder_is_sporch_split_plans_else_under_sporch_home(tmp_path):
    assert cache_dir({"SPORCH_SPLIT_PLANS": str(tmp_path / "plans"), "SPORCH_HOME": "/nowhere"}) == tmp_path / "plans"
    assert cache_dir({"SPORCH_HOME": str(tmp_path)}) == tmp_path / "split-plans"
    assert verdict_path("X", "1.0", tmp_path) == tmp_path / "X@diffusers-1.0.json"


@pytest.mark.parametrize("call, needle", [
    (lambda: head_width({"attention_head_dim": 42}, "attention_head_dim", 40, multiple=4), "attention_head_dim 42 must be a multiple of 4"),
    (lambda: head_width({"attention_head_dim": 7}, "attention_head_dim", 8), "(RoPE rotates channel pairs)"),
    (lambda: rope_axes({"axes": [2, 2, 2]}, "axes", (), 8), "axes [2, 2, 2] sums to 6, not the head width 8"),
    (lambda: rope_axes({"axes": [3, 5]}, "axes", (), 8), "must hold even numbers"),
    (lambda: rope_axes({"axes": "16"}, "axes", (), 8), "must be a list"),
    (lambda: heads_per_kv_head(24, 5, heads_key="num_attention_heads", kv_key="num_kv_heads"), "num_kv_heads 5 must divide"),
])
def test_the_rope_rules_name_the_key(call, needle):
    with pytest.raises(ClassRuleError, match=None) as err:
        call()
    assert needle in str(err.value)


@pytest.mark.parametrize("fam", ["cogview4", "lumina2", "chroma"])
def test_each_derived_family_reads_its_published_preset(fam):
    f = get_family(fam)
    assert f.derived == f.classes and not f.split_plans
    shape = f.shape(f.presets[0].config)
    assert shape["hidden"] == shape["num_heads"] * shape["head_dim"] and f.split_plan_source(f.classes[0]).startswith("derived")
    assert f.presets[0].parameters.total > 2e9  # 6.4B, 2.6B, 8.9B


def test_a_config_breaking_the_class_rope_rule_is_refused_naming_the_file_and_key(tmp_path):
    where = tmp_path / "transformer"
    where.mkdir()
    (where / "config.json").write_text(json.dumps({**LUMINA, "axes_dim_rope": [2, 2, 2]}))
    with pytest.raises(CheckpointError) as err:
        read_checkpoint_model(str(tmp_path))
    line = str(err.value)
    assert "\n" not in line and str(where / "config.json") in line and "axes_dim_rope [2, 2, 2] sums to 6" in line


def _folder(tmp_path):
    where = tmp_path / "m" / "transformer"
    where.mkdir(parents=True)
    (where / "config.json").write_text(json.dumps(LUMINA))
    return tmp_path / "m"


def test_the_planner_refuses_a_class_whose_cached_verdict_is_not_exact(run_cli, tmp_path, monkeypatch):
    monkeypatch.setenv("SPORCH_SPLIT_PLANS", str(tmp_path / "plans"))
    job = tmp_path / "job.yaml"
    job.write_text("name: x\nmodel: {text_len: 7}\nworkload: {kind: verify, frames: 1, height: 48, width: 80, steps: 1, "
                   "guidance_scale: 1.0, dtype: float32}\n")
    args = ("plan", "--cluster", "local", str(job), f"model.weights={_folder(tmp_path)}", "parallel.ulysses=2", "parallel.ring=2")
    code, out, err = run_cli(*args)  # no verdict yet: planned, the ranks derive and check first
    assert code == 0, err
    write_verdict(PlanVerdict("Lumina2Transformer2DModel", verdict_report("X")["diffusers_version"], exact=False,
                              plan={}, errors={2: 3e-7, 4: 0.125}, reason="a test verdict"))
    line = one_line_error(*run_cli(*args), "Lumina2Transformer2DModel", "largest error 0.12 relative on 4 sequence ranks")
    assert "cannot run sequence-parallel" in line
