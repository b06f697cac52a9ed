"""Sharded parameters and low-bit weights, planner side (torch-free): a model's
``parallel.shard_weights`` is planned (the memory estimate per option, what ``auto`` picks),
``model.quant`` is planned and shrinks the estimate, and what the runtime cannot combine (quant +
sharding) is one line, exit 2; LoRA + sharding is planned."""

from __future__ import annotations

import json

import pytest

from sporch.orchestrator.errors import SporchError
from sporch.orchestrator.plan.estimates import GIB
from tests.cli.test_bad_input_hardening import one_line_error
from tests.plan.test_families import LTX, VERIFY, folder, plan
from tests.plan.test_generic_levers_plan import lora_file

QWEN_1328 = dict(kind="benchmark", frames=1, height=1328, width=1328, steps=30, guidance_scale=4.0, dtype="bfloat16")


@pytest.mark.parametrize("shard", ["world", "sequence"])
def test_shard_weights_on_a_generic_folder_is_planned(tmp_path, shard):
    """The refusal is gone: a diffusers folder planned with its parameters sharded over 4 ranks."""
    p = plan({"weights": str(folder(tmp_path, LTX)), "text_len": 7}, parallel={"ulysses": 4, "shard_weights": shard})
    assert p.model.diffusers_class == "LTXVideoTransformer3DModel"
    assert (p.placement.shard_weights, p.placement.shard_degree) == (shard, 4)
    w = p.estimates.weights
    assert w.parameter_bytes_sharded == -(-p.estimates.compute.parameters // 4) * 4  # float32
    assert p.estimates.memory.parameter_bytes_per_gpu == w.parameter_bytes_sharded + w.parameter_bytes_gathered


def test_a_generic_preset_that_does_not_fit_unsharded_is_sharded_by_auto():
    """Qwen-Image (20 B, bf16: 38 GiB of parameters) on 40 GB A100s: unsharded it does not fit and
    the plan says to shard; ``auto`` shards over the replica's ranks and fits, as for Wan."""
    plain = plan({"preset": "qwen-image"}, QWEN_1328, "a100-40gx32", parallel={"shard_weights": "none"})
    assert not plain.estimates.memory.fits and plain.placement.shard_weights == "none"
    assert any("parallel.shard_weights=world (or auto)" in w for w in plain.warnings)
    full = plain.estimates.weights.parameter_bytes_full
    assert plain.estimates.memory.parameter_bytes_per_gpu == full > 35 * GIB

    auto = plan({"preset": "qwen-image"}, QWEN_1328, "a100-40gx32", parallel={"shard_weights": "auto"})
    p, e = auto.placement, auto.estimates
    assert e.memory.fits and p.shard_weights in ("sequence", "world") and p.shard_degree > 1, p
    assert p.reason.startswith("auto: ") and "does not fit" in p.reason
    # 1/n of the parameters stay, plus the root unit and two blocks gathered at a time
    assert e.weights.parameter_bytes_sharded == -(-e.compute.parameters // p.shard_degree) * 2
    assert e.memory.parameter_bytes_per_gpu < full / 4
    assert e.weights.weight_gather_bytes_per_rank_per_step > 0


def test_quant_on_a_generic_preset_is_planned_and_shrinks_the_weights():
    base = plan({"preset": "qwen-image"}, QWEN_1328, "l40sx8", parallel={"shard_weights": "none"})
    q = plan({"preset": "qwen-image", "quant": "int8_weight"}, QWEN_1328, "l40sx8", parallel={"shard_weights": "none"})
    assert q.model.quant == "int8_weight" and q.estimates.weights.weight_quant == "int8_weight"
    assert q.estimates.weights.parameter_bytes_full < 0.6 * base.estimates.weights.parameter_bytes_full


def test_quant_on_a_generic_folder_is_planned(tmp_path):
    p = plan({"weights": str(folder(tmp_path, LTX)), "text_len": 7, "quant": "int8_weight"}, parallel={"ulysses": 4})
    assert (p.model.diffusers_class, p.model.quant, p.placement.shard_weights) == (
        "LTXVideoTransformer3DModel", "int8_weight", "none")


def _job(tmp_path, model: dict) -> str:
    job = tmp_path / "job.yaml"
    job.write_text("name: x\nmodel: " + json.dumps(model) + "\nworkload: " + json.dumps(VERIFY) + "\n")
    return str(job)


def test_quant_with_sharded_parameters_is_one_line(run_cli, tmp_path):
    root = folder(tmp_path, LTX)
    code, out, err = run_cli("plan", "--cluster", "local", _job(tmp_path, {"text_len": 7, "quant": "int8_weight"}),
                             f"model.weights={root}", "parallel.ulysses=4", "parallel.shard_weights=world")
    one_line_error(code, out, err, "model.quant=int8_weight", "parallel.shard_weights=world")


def test_lora_with_sharded_parameters_is_planned(run_cli, tmp_path):
    """The generic path merges adapters into sharded parameters row by row (runtime/models/lora.py
    ``merge_lora_rows``): the planner keeps both, from the CLI and from its API."""
    root = folder(tmp_path, LTX)
    lora = lora_file(tmp_path / "l.safetensors")
    code, out, err = run_cli("plan", "--cluster", "local",
                             _job(tmp_path, {"text_len": 7, "lora": [{"path": str(lora)}]}),
                             f"model.weights={root}", "parallel.ulysses=4", "parallel.shard_weights=sequence")
    assert code == 0, (out, err)
    for shard in ("sequence", "world"):
        p = plan({"weights": str(root), "text_len": 7, "lora": [{"path": str(lora)}]},
                 parallel={"ulysses": 4, "shard_weights": shard})
        assert (p.model.diffusers_class, p.placement.shard_weights, len(p.model.lora)) == (
            "LTXVideoTransformer3DModel", shard, 1), p


def test_inspect_lists_the_sharded_placement_of_a_generic_folder(run_cli, tmp_path):
    """`sporch inspect` on a generic-path folder: the memory rows are plain and shard_weights=world
    (the benchmark places no text encoder or VAE), sharding needing less per GPU."""
    from tests.plan.test_families import QWEN

    root = folder(tmp_path, {**QWEN, "num_layers": 16, "attention_head_dim": 128, "axes_dims_rope": [16, 56, 56]})  # blocks outweigh the gathers
    header = json.dumps({"img_in.weight": {"dtype": "F32", "shape": [48, 16], "data_offsets": [0, 3072]}}).encode()
    (root / "transformer" / "diffusion_pytorch_model.safetensors").write_bytes(
        len(header).to_bytes(8, "little") + header + bytes(3072))
    code, out, err = run_cli("inspect", root, "--json", "--gpus", "4")
    assert code == 0, err
    rows = {r["option"]: r["per_gpu"] for r in json.loads(out)["placements"]["rows"]}
    assert list(rows) == ["plain", "shard_weights=world"], rows
    assert rows["shard_weights=world"]["4"]["gib"] < rows["plain"]["4"]["gib"], rows
