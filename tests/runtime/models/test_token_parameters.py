"""The cost model's GEMM count (orchestrator/plan/estimates.py ``token_parameter_count`` and
``context_flops_per_sample``) against diffusers' own published models, built on the meta
device (no memory): the weights of the linears an image/video token passes through, and the
text keys and values of Wan's cross-attention."""

from __future__ import annotations

import re

import pytest

torch = pytest.importorskip("torch")
diffusers = pytest.importorskip("diffusers")

from sporch.orchestrator.config.cluster import find_cluster  # noqa: E402
from sporch.orchestrator.config.job_checks import validate_job  # noqa: E402
from sporch.orchestrator.config.job_spec import JobSpec, ModelSpec, WorkloadSpec  # noqa: E402
from sporch.orchestrator.plan.estimates import context_flops_per_sample, token_parameter_count  # noqa: E402
from sporch.orchestrator.plan.planner import make_plan  # noqa: E402


def plan_model(preset: str, **workload):
    job = validate_job(JobSpec(name="t", model=ModelSpec(preset=preset),
                               workload=WorkloadSpec(kind="benchmark", dtype="bfloat16", **workload)), "t")
    return make_plan(find_cluster("h100x64"), job).model


def weights(model, pattern: str) -> int:
    """Weights (no biases) of the Linear and Conv modules whose names match ``pattern``."""
    rx = re.compile(pattern)
    return sum(m.weight.numel() for name, m in model.named_modules()
               if isinstance(m, (torch.nn.Linear, torch.nn.Conv3d)) and rx.fullmatch(name))


def test_flux_dev_token_parameters_are_one_stream_without_modulation():
    with torch.device("meta"):
        ref = diffusers.FluxTransformer2DModel(num_layers=19, num_single_layers=38, attention_head_dim=128,
                                               num_attention_heads=24, joint_attention_dim=4096,
                                               pooled_projection_dim=768, guidance_embeds=True, in_channels=64)
    image_stream = weights(ref, r"transformer_blocks\.\d+\.(attn\.(to_q|to_k|to_v|to_out\.0)|ff\.net\.(0\.proj|2))")
    single = weights(ref, r"single_transformer_blocks\.\d+\.(attn\.(to_q|to_k|to_v)|proj_mlp|proj_out)")
    ends = weights(ref, r"x_embedder|proj_out")
    model = plan_model("flux.1-dev", height=1024, width=1024, steps=28)
    assert token_parameter_count(model) == image_stream + single + ends
    assert token_parameter_count(model) / sum(p.numel() for p in ref.parameters()) == pytest.approx(0.54, abs=0.01)
    assert context_flops_per_sample(model) == 0  # joint attention: the text tokens are in the sequence


def test_wan_14b_token_parameters_and_text_keys_values():
    with torch.device("meta"):
        ref = diffusers.WanTransformer3DModel(num_attention_heads=40, attention_head_dim=128, ffn_dim=13824,
                                              num_layers=40, in_channels=16, out_channels=16, text_dim=4096,
                                              freq_dim=256, patch_size=(1, 2, 2))
    per_token = weights(ref, r"blocks\.\d+\.(attn1\.(to_q|to_k|to_v|to_out\.0)|attn2\.(to_q|to_out\.0)"
                             r"|ffn\.net\.(0\.proj|2))")
    ends = weights(ref, r"patch_embedding|proj_out")
    text_kv = weights(ref, r"blocks\.\d+\.attn2\.(to_k|to_v)")
    model = plan_model("wan2.1-t2v-14b", frames=81, height=720, width=1280, steps=50)
    assert token_parameter_count(model) == per_token + ends
    assert context_flops_per_sample(model) == 2 * model.text_len * text_kv
