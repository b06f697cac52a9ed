"""Wan2.1 I2V 14B (480p, 720p) in the planner: the presets, the image branch's parameters and
FLOPs, the CLIP image encoder in the generate memory, and the published folder planning alone."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from sporch.orchestrator.config.cluster import find_cluster
from sporch.orchestrator.config.job import job_from_dict
from sporch.orchestrator.errors import SporchError
from sporch.orchestrator.models.families.wan import PARTS_I2V
from sporch.orchestrator.plan.planner import make_plan

REPO = Path(__file__).resolve().parents[2]
#: The published image_encoder/config.json's CLIPVisionModel, counted with transformers on the meta
#: device (tests/runtime/models/test_published.py checks this number)
CLIP_VIT_H_VISION = 630_766_080
SIZES = {"wan2.1-i2v-14b-480p": (480, 832), "wan2.1-i2v-14b-720p": (720, 1280)}


def _plan(preset_or_weights: dict, workload: dict, cluster: str = "a100x32", pipeline: dict | None = None):
    job = {"name": "i2v", "model": preset_or_weights, "workload": workload, **({"pipeline": pipeline} if pipeline else {})}
    return make_plan(find_cluster(cluster), job_from_dict(job, "<test>"))


def _generate(height: int, width: int, frames: int = 81, **extra) -> dict:
    return {"kind": "generate", "frames": frames, "height": height, "width": width, "steps": 50, "guidance_scale": 5.0,
            "prompt": "a cat", "image": "first.png", **extra}


@pytest.mark.parametrize("preset", sorted(SIZES))
def test_each_preset_plans_its_resolution_with_the_image_branch_and_encoder(preset):
    h, w = SIZES[preset]
    plan = _plan({"preset": preset}, _generate(h, w))
    t2v = _plan({"preset": "wan2.1-t2v-14b"}, dict(_generate(h, w), image=None))
    est, pipe = plan.estimates, plan.estimates.pipeline
    assert (plan.model.in_channels, plan.model.depth, plan.model.hidden) == (36, 40, 5120)
    assert list(plan.sequence.grid) == [21, h // 16, w // 16]
    # 40 blocks x (k_img, v_img 5120 x 5120 + biases + norm) and the image embedding: 2.1 B more than T2V
    extra = est.compute.parameters - t2v.estimates.compute.parameters
    assert 40 * 2 * 5120 * 5120 < extra < 40 * 2 * 5120 * 5120 + 20_000_000, extra
    assert est.compute.context_flops_per_sample == t2v.estimates.compute.context_flops_per_sample * (512 + 257) // 512
    assert pipe.image_encoder.bytes == CLIP_VIT_H_VISION * 2 and pipe.image_encoder.ranks == (0,)  # loaded with the pipeline, bf16
    assert pipe.busiest_rank.image_encoder == CLIP_VIT_H_VISION * 2
    assert PARTS_I2V["image_encoder_parameters"] == CLIP_VIT_H_VISION


def test_the_image_encoder_is_the_encode_peak_when_the_text_encoder_runs_on_the_cpu():
    small = _generate(256, 256, frames=5)
    cpu = _plan({"preset": "wan2.1-i2v-14b-480p"}, small, "h100x64", {"text_encoder": "cpu", "vae": "leader"})
    busy = cpu.estimates.pipeline.busiest_rank
    assert busy.text_encoder == 0 and busy.image_encoder == CLIP_VIT_H_VISION * 2
    encode = busy.image_encoder + busy.reserved
    assert cpu.estimates.pipeline.leader_memory_bytes >= encode


def test_a_generate_job_needs_the_first_frame():
    with pytest.raises(SporchError, match="is image-to-video: set workload.image"):
        _plan({"preset": "wan2.1-i2v-14b-720p"}, dict(_generate(720, 1280), image=None))


def _published_folder(root: Path) -> Path:
    """Wan2.1-I2V-14B-480P-Diffusers' transformer/config.json and model_index.json beside a stand-in
    weights file."""
    (root / "transformer").mkdir(parents=True)
    (root / "transformer" / "config.json").write_text(json.dumps({
        "_class_name": "WanTransformer3DModel", "_diffusers_version": "0.33.0.dev0", "added_kv_proj_dim": 5120,
        "attention_head_dim": 128, "cross_attn_norm": True, "eps": 1e-06, "ffn_dim": 13824, "freq_dim": 256,
        "image_dim": 1280, "in_channels": 36, "num_attention_heads": 40, "num_layers": 40, "out_channels": 16,
        "patch_size": [1, 2, 2], "qk_norm": "rms_norm_across_heads", "rope_max_seq_len": 1024, "text_dim": 4096}))
    (root / "model_index.json").write_text(json.dumps({
        "_class_name": "WanImageToVideoPipeline", "image_encoder": ["transformers", "CLIPVisionModel"],
        "image_processor": ["transformers", "CLIPImageProcessor"], "transformer": ["diffusers", "WanTransformer3DModel"],
        "vae": ["diffusers", "AutoencoderKLWan"]}))
    header = json.dumps({"patch_embedding.weight": {"dtype": "BF16", "shape": [2, 2], "data_offsets": [0, 8]}}).encode()
    (root / "transformer" / "diffusion_pytorch_model.safetensors").write_bytes(
        len(header).to_bytes(8, "little") + header + bytes(8))
    return root


def test_the_published_folder_plans_alone_and_matches_both_presets(tmp_path):
    folder = _published_folder(tmp_path / "Wan2.1-I2V-14B-480P-Diffusers")
    plan = _plan({"weights": str(folder)}, _generate(480, 832), "h100x64")
    assert plan.model.preset is None and plan.model.in_channels == 36
    assert plan.model.diffusers_config["image_dim"] == 1280
    named = _plan({"weights": str(folder), "preset": "wan2.1-i2v-14b-480p"}, _generate(480, 832), "h100x64")
    assert named.estimates.compute.parameters == plan.estimates.compute.parameters
    proc = subprocess.run([sys.executable, "-m", "sporch.orchestrator.cli.main", "inspect", str(folder), "--json"],
                          capture_output=True, text=True, cwd=REPO)
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["presets"] == ["wan2.1-i2v-14b-480p", "wan2.1-i2v-14b-720p"]
