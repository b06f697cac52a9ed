"""A pipeline folder's text encoders and VAE sized from their safetensors headers (models/pipeline_sizes.py):
parameters, numbered layers and the largest embedding of every text encoder model_index.json lists, one
file or an index of shards; unknown (None) without an index or with a part stored another way; a broken
header is one line at plan time."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from sporch.orchestrator.config.cluster import find_cluster
from sporch.orchestrator.config.job import job_from_dict
from sporch.orchestrator.errors import SporchError
from sporch.orchestrator.models.pipeline_sizes import read_pipeline_sizes
from sporch.orchestrator.plan.planner import make_plan
from tests.plan.test_planner_reads_once import safetensors_file

LTX = {"_class_name": "LTXVideoTransformer3DModel", "in_channels": 8, "out_channels": 8, "patch_size": 1,
       "patch_size_t": 1, "num_attention_heads": 2, "attention_head_dim": 8, "cross_attention_dim": 16,
       "num_layers": 2, "caption_channels": 16}
T5 = {"shared.weight": [100, 16], "encoder.block.0.layer.0.SelfAttention.q.weight": [16, 16],
      "encoder.block.1.layer.0.SelfAttention.q.weight": [16, 16], "encoder.final_layer_norm.weight": [16, 1]}
VAE = {"decoder.conv_in.weight": [32, 8], "decoder.conv_out.weight": [3, 32]}


def pipeline(root: Path, *, shards: bool = False, bin_vae: bool = False) -> Path:
    for sub in ("transformer", "text_encoder", "vae", "tokenizer"):
        (root / sub).mkdir(parents=True)
    (root / "transformer" / "config.json").write_text(json.dumps(LTX))
    (root / "model_index.json").write_text(json.dumps({
        "_class_name": "LTXPipeline", "transformer": ["diffusers", "LTXVideoTransformer3DModel"],
        "text_encoder": ["transformers", "T5EncoderModel"], "tokenizer": ["transformers", "T5Tokenizer"],
        "vae": ["diffusers", "AutoencoderKLLTXVideo"], "scheduler": [None, None]}))
    if shards:
        names = list(T5)
        safetensors_file(root / "text_encoder" / "model-1.safetensors", {n: T5[n] for n in names[:2]})
        safetensors_file(root / "text_encoder" / "model-2.safetensors", {n: T5[n] for n in names[2:]})
        (root / "text_encoder" / "model.safetensors.index.json").write_text(json.dumps(
            {"weight_map": {n: "model-1.safetensors" if i < 2 else "model-2.safetensors" for i, n in enumerate(names)}}))
    else:
        safetensors_file(root / "text_encoder" / "model.safetensors", T5)
    if bin_vae:
        (root / "vae" / "diffusion_pytorch_model.bin").write_bytes(b"\0" * 8)
    else:
        safetensors_file(root / "vae" / "diffusion_pytorch_model.safetensors", VAE)
    return root


@pytest.mark.parametrize("shards", [False, True])
def test_sizes_from_the_headers(tmp_path, shards):
    sizes = read_pipeline_sizes(pipeline(tmp_path / "p", shards=shards))
    assert sizes == {"text_encoder": "T5EncoderModel", "text_encoder_parameters": 1600 + 256 + 256 + 16,
                     "text_encoder_layers": 2, "text_encoder_embedding": 1600, "text_encoder_layer": 256,
                     "vae": "AutoencoderKLLTXVideo", "vae_parameters": 256 + 96}


def test_layers_at_the_top_of_the_names_are_counted(tmp_path):
    """A LlamaModel's own tensors (HunyuanVideo's text encoder: ``layers.N.`` with no prefix) are layers
    too, and the largest layer (what a sharded encoder gathers) is the biggest sum of a layer's tensors."""
    root = pipeline(tmp_path / "p")
    safetensors_file(root / "text_encoder" / "model.safetensors", {
        "embed_tokens.weight": [100, 16], "layers.0.self_attn.q_proj.weight": [16, 16],
        "layers.1.self_attn.q_proj.weight": [16, 16], "layers.1.mlp.up_proj.weight": [32, 16], "norm.weight": [16, 1]})
    sizes = read_pipeline_sizes(root)
    assert (sizes["text_encoder_layers"], sizes["text_encoder_layer"]) == (2, 256 + 512)


def test_unknown_without_an_index_or_with_a_part_stored_another_way(tmp_path):
    assert read_pipeline_sizes(pipeline(tmp_path / "bin", bin_vae=True)) is None
    root = pipeline(tmp_path / "noindex")
    (root / "model_index.json").unlink()
    assert read_pipeline_sizes(root) is None


def _plan(weights: Path):
    job = {"name": "s", "model": {"weights": str(weights)},
           "workload": {"kind": "generate", "prompt": "a fox", "frames": 9, "height": 64, "width": 64, "steps": 2,
                        "guidance_scale": 1.0, "dtype": "float32"}, "parallel": {"cfg": 1, "ring": 2, "ulysses": 2}}
    return make_plan(find_cluster("local"), job_from_dict(job, "<test>"))


def test_the_plan_records_the_sizes_and_a_broken_header_is_one_line(tmp_path):
    plan = _plan(pipeline(tmp_path / "ok"))
    assert plan.model.pipeline_sizes["vae_parameters"] == 352
    assert plan.estimates.pipeline.busiest_rank.text_encoder == (1600 + 256 + 256 + 16) * 4
    broken = pipeline(tmp_path / "broken")
    (broken / "vae" / "diffusion_pytorch_model.safetensors").write_bytes(b"\x10" + b"\0" * 7 + b"{")
    with pytest.raises(SporchError, match="diffusion_pytorch_model.safetensors") as err:
        _plan(broken)
    assert "\n" not in str(err.value)
