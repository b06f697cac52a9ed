"""LoRA, step cache and compile on the generic path, planner side (torch-free): what works is
planned and recorded, what does not is one line (exit 2)."""

from __future__ import annotations

import json

import pytest

from sporch.orchestrator.errors import SporchError
from tests.cli.test_bad_input_hardening import one_line_error
from tests.plan.test_families import LTX, VERIFY, folder, plan

SD3 = {"_class_name": "SD3Transformer2DModel", "sample_size": 16, "patch_size": 2, "in_channels": 4,
       "num_layers": 2, "attention_head_dim": 8, "num_attention_heads": 4, "joint_attention_dim": 16,
       "caption_projection_dim": 32, "pooled_projection_dim": 8, "out_channels": 4}


def lora_file(path, module="transformer.transformer_blocks.0.attn1.to_q", rank=2, width=48):
    """A safetensors file with one LoRA pair (zeros) on ``module``."""
    n = 4 * rank * width
    header = json.dumps({f"{module}.lora_A.weight": {"dtype": "F32", "shape": [rank, width], "data_offsets": [0, n]},
                         f"{module}.lora_B.weight": {"dtype": "F32", "shape": [width, rank],
                                                     "data_offsets": [n, 2 * n]}}).encode()
    path.write_bytes(len(header).to_bytes(8, "little") + header + bytes(2 * n))
    return path


def test_lora_on_the_generic_path_is_planned_and_recorded(tmp_path):
    root = folder(tmp_path, LTX)
    lora = lora_file(tmp_path / "l.safetensors")
    p = plan({"weights": str(root), "text_len": 7, "lora": [{"path": str(lora), "scale": 0.6}]}, parallel={"ulysses": 4})
    assert p.model.diffusers_class == "LTXVideoTransformer3DModel"
    assert p.model.lora == [{"path": str(lora.resolve()), "scale": 0.6, "expert": "both"}]


@pytest.mark.parametrize("entry, needle", [
    ({"expert": "transformer_2"}, "model.lora[0].expert transformer_2 picks one of two experts"),
    ({"path": "missing.safetensors"}, "does not exist"),
])
def test_a_generic_lora_that_cannot_apply_is_refused(tmp_path, entry, needle):
    root = folder(tmp_path, LTX)
    lora = {"path": str(lora_file(tmp_path / "l.safetensors")), **entry}
    if not lora["path"].startswith("/"):
        lora["path"] = str(tmp_path / lora["path"])
    with pytest.raises(SporchError, match=needle.replace(".", r"\.").replace("[", r"\[")):
        plan({"weights": str(root), "text_len": 7, "lora": [lora]}, parallel={"ulysses": 4})


@pytest.mark.parametrize("config, cache, needle", [
    # every family takes every cache now; MagCache without ratios (none published for a folder) is refused
    (LTX, {"method": "magcache", "threshold": 0.1}, "workload.cache.method=magcache needs the model's magnitude ratios"),
    (SD3, {"method": "magcache", "threshold": 0.1}, "result.json step_cache.changes"),
])
def test_step_cache_the_generic_path_cannot_run_is_one_line(run_cli, tmp_path, config, cache, needle):
    root = folder(tmp_path, config)
    job = tmp_path / "job.yaml"
    workload = {**VERIFY, "kind": "generate", "prompt": "a cat", "cache": cache}  # (a cache needs denoising steps)
    job.write_text("name: x\nmodel: {text_len: 7}\nworkload: " + json.dumps(workload) + "\n")
    code, out, err = run_cli("plan", "--cluster", "local", job, f"model.weights={root}", "parallel.ulysses=2",
                             "parallel.ring=2")
    one_line_error(code, out, err, needle)


def test_fbcache_on_a_generic_generate_is_planned_and_recorded(tmp_path):
    """fbcache, a method LTX-Video's family lists, plans for generate and is recorded (the generic
    generate applies it: tests/runtime/pipelines/test_generate_generic.py against diffusers')."""
    workload = {**VERIFY, "kind": "generate", "prompt": "a cat", "cache": {"method": "fbcache", "threshold": 0.1}}
    p = plan({"weights": str(folder(tmp_path, LTX)), "text_len": 7}, workload, parallel={"ulysses": 2, "ring": 2})
    assert (p.workload.kind, p.workload.cache.method, p.workload.cache.threshold) == ("generate", "fbcache", 0.1)


def test_compile_on_the_generic_path_is_planned(tmp_path):
    p = plan({"weights": str(folder(tmp_path, LTX)), "text_len": 7}, dict(VERIFY, compile=True), parallel={"ulysses": 4})
    assert p.workload.compile is True and p.model.diffusers_class
