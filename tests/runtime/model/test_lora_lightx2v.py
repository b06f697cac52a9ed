"""LightX2V's step-distill LoRA format (issue 36): original Wan2.1 names under
``diffusion_model.``, ``lora_down``/``lora_up`` pairs (an ``.alpha`` where given) beside
whole-tensor differences: ``.diff`` (a weight), ``.diff_b`` (a bias), ``.diff_m`` (a block's
modulation table). Merged at load as W += scale x (alpha / rank) x up @ down and P += scale x
delta; checked parameter by parameter against that arithmetic, and at plan time."""

from __future__ import annotations

import json

import pytest
import torch

from sporch.orchestrator.models.checkpoint_files import CheckpointError
from sporch.orchestrator.models.lora_file import read_lora
from sporch.orchestrator.models.lora_targets import map_deltas
from sporch.runtime.model import build_model, tiny_model_dict
from sporch.runtime.model.lora import merge_loras

SCALE = 0.7
RANK = 4
P = "diffusion_model."


def lightx2v_file(model, path, *, extra=None):
    """A tiny adapter in LightX2V's layout for the tiny Wan model: pairs on block 0's self-attn q
    (alpha 8) and FFN input (no alpha), bias differences for both, block 1's modulation, and a
    norm3 weight difference. Returns {sporch parameter: expected value after the merge}."""
    from safetensors.torch import save_file

    g = torch.Generator().manual_seed(5)
    state = {k: v.clone() for k, v in model.state_dict().items()}
    t, want = {}, {}

    def pair(orig, ours, alpha=None):
        w = state[ours + ".weight"]
        down, up = torch.randn(RANK, w.shape[1], generator=g) * 0.3, torch.randn(w.shape[0], RANK, generator=g) * 0.3
        t[f"{P}{orig}.lora_down.weight"], t[f"{P}{orig}.lora_up.weight"] = down, up
        if alpha is not None:
            t[f"{P}{orig}.alpha"] = torch.tensor(float(alpha))
        want[ours + ".weight"] = w + SCALE * ((alpha or RANK) / RANK) * (up @ down)

    def diff(key, ours):
        d = torch.randn(state[ours].shape, generator=g) * 0.1
        t[P + key] = d
        want[ours] = state[ours] + SCALE * d

    pair("blocks.0.self_attn.q", "blocks.0.self_attn.q", alpha=8)
    pair("blocks.0.ffn.0", "blocks.0.ffn.fc1")
    diff("blocks.0.self_attn.q.diff_b", "blocks.0.self_attn.q.bias")
    diff("blocks.0.ffn.0.diff_b", "blocks.0.ffn.fc1.bias")
    diff("blocks.1.diff_m", "blocks.1.modulation")
    diff("blocks.0.norm3.diff", "blocks.0.norm3.weight")
    t.update(extra or {})
    save_file(t, str(path))
    return want


def test_lightx2v_adapter_merges_pairs_and_differences(tmp_path):
    model = build_model(tiny_model_dict("cross"), seed=0)
    before = {k: v.clone() for k, v in model.state_dict().items()}
    want = lightx2v_file(model, tmp_path / "lightx2v_4step.safetensors")
    lora = read_lora(tmp_path / "lightx2v_4step.safetensors")
    assert lora.format == "kohya" and {m.name for m in lora.modules} == {"blocks.0.self_attn.q", "blocks.0.ffn.0"}
    assert {d.param for d in lora.deltas} == {"blocks.0.self_attn.q.bias", "blocks.0.ffn.0.bias",
                                               "blocks.1.modulation", "blocks.0.norm3.weight"}
    merge_loras(model, [{"path": str(tmp_path / "lightx2v_4step.safetensors"), "scale": SCALE}])
    after = model.state_dict()
    for name, value in after.items():
        expected = want.get(name, before[name])
        assert torch.allclose(value, expected, rtol=1e-6, atol=1e-6), name
    assert len(want) == 6 and all(not torch.equal(after[n], before[n]) for n in want)


def test_a_difference_for_a_missing_parameter_is_one_line(tmp_path):
    model = build_model(tiny_model_dict("cross"), seed=0)
    lightx2v_file(model, tmp_path / "bad.safetensors", extra={P + "blocks.7.diff_m": torch.zeros(1, 6, 64)})
    with pytest.raises(CheckpointError, match=r"1 of the adapter's 5 difference tensors change no parameter") as e:
        merge_loras(model, [{"path": str(tmp_path / "bad.safetensors"), "scale": 1.0}])
    assert "\n" not in str(e.value)


def test_the_recipe_fragment_plans_with_the_adapter(tmp_path, run_cli):
    """The documented LightX2V 4-step fragment (examples/recipes) on the tiny model: the plan
    takes the adapter (its differences checked by the name table) with 4 steps, shift 5, CFG off."""
    from tests.testutil import EXAMPLES

    model = build_model(tiny_model_dict("cross"), seed=0)
    lightx2v_file(model, tmp_path / "lora.safetensors")
    code, out, err = run_cli("plan", "--cluster", "local", "--json", EXAMPLES / "tiny.yaml",
                             "workload.kind=inference", f"model.lora=[{{path: {tmp_path / 'lora.safetensors'}}}]",
                             "model.preset=tiny", "workload.steps=4", "workload.shift=5.0", "workload.guidance_scale=1.0")
    assert code == 0, err
    plan = json.loads(out)
    assert plan["model"]["lora"][0]["path"] == str(tmp_path / "lora.safetensors")
    assert plan["workload"]["steps"] == 4 and plan["workload"]["cfg_enabled"] is False
    assert map_deltas(read_lora(tmp_path / "lora.safetensors"), "cross")


def test_recipe_sigmas_give_lightx2v_timesteps_in_both_samplers():
    """workload.sigmas [1, .75, .5, .25] with shift 5: LightX2V's denoising_step_list
    [1000, 750, 500, 250] after its sample_shift 5, in sporch's sampler and in diffusers' Euler
    scheduler as generate sets it up."""
    from types import SimpleNamespace

    import diffusers

    from sporch.runtime.model.sampler import flow_sigmas
    from sporch.runtime.pipelines.schedulers import timesteps

    want = [5 * s / (1 + 4 * s) for s in (1.0, 0.75, 0.5, 0.25)]
    ours = flow_sigmas(4, 5.0, [1.0, 0.75, 0.5, 0.25])
    assert torch.allclose(ours, torch.tensor([*want, 0.0], dtype=torch.float64))
    spec = SimpleNamespace(family="wan", steps=4, sigmas=(1.0, 0.75, 0.5, 0.25))
    got = timesteps(spec, diffusers.FlowMatchEulerDiscreteScheduler(shift=5.0), 0, torch.device("cpu"))
    assert torch.allclose(got.double(), torch.tensor(want, dtype=torch.float64) * 1000, atol=1e-3)
    plain = timesteps(SimpleNamespace(family="wan", steps=4, sigmas=None),
                      diffusers.FlowMatchEulerDiscreteScheduler(shift=5.0), 0, torch.device("cpu"))
    assert not torch.allclose(plain.double(), got.double(), atol=1.0)  # without them: another spacing
