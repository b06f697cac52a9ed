"""Model families on the generic path, planner side (torch-free): the family resolved once into
plan.model, a diffusers folder planned from its config.json alone, published presets planned on
a100x32, and what the generic path does not do refused in one line (exit 2)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from sporch.orchestrator.config.cluster import find_cluster
from sporch.orchestrator.config.job import job_from_dict
from sporch.orchestrator.models.families import FAMILIES, family_of_class
from sporch.orchestrator.errors import SporchError
from sporch.orchestrator.plan.planner import make_plan
from tests.cli.test_bad_input_hardening import one_line_error

LTX = {"_class_name": "LTXVideoTransformer3DModel", "in_channels": 8, "out_channels": 8, "patch_size": 1,
       "patch_size_t": 1, "num_attention_heads": 6, "attention_head_dim": 8, "cross_attention_dim": 48,
       "num_layers": 2, "caption_channels": 16}
QWEN = {"_class_name": "QwenImageTransformer2DModel", "patch_size": 2, "in_channels": 16, "out_channels": 4,
        "num_layers": 2, "attention_head_dim": 16, "num_attention_heads": 3, "joint_attention_dim": 24,
        "axes_dims_rope": [4, 6, 6]}
VERIFY = dict(kind="verify", frames=1, height=96, width=160, steps=1, guidance_scale=1.0, dtype="float32")


def folder(tmp_path: Path, config: dict, pipeline: bool = True) -> Path:
    root = tmp_path / config["_class_name"]
    where = root / "transformer" if pipeline else root
    where.mkdir(parents=True)
    (where / "config.json").write_text(json.dumps(config))
    return root


def plan(model: dict, workload: dict = VERIFY, cluster: str = "local", **extra):
    return make_plan(find_cluster(cluster), job_from_dict({"name": "fam", "model": model, "workload": workload,
                                                           **extra}))


def test_every_family_class_is_found_once():
    classes = [c for f in FAMILIES for c in f.classes]
    assert len(classes) == len(set(classes))
    assert family_of_class("QwenImageTransformer2DModel").name == "qwen-image"
    assert family_of_class("SanaTransformer2DModel") is None


@pytest.mark.parametrize("pipeline", [True, False])
def test_a_diffusers_folder_plans_from_its_config_alone(tmp_path, pipeline):
    p = plan({"weights": str(folder(tmp_path, LTX, pipeline)), "text_len": 7}, parallel={"ulysses": 2, "ring": 2})
    m = p.model
    assert (m.family, m.diffusers_class) == ("ltx-video", "LTXVideoTransformer3DModel")
    assert m.diffusers_config["num_layers"] == 2  # the folder's config.json, recorded (its parameters are counted from it)
    assert (m.num_heads, m.head_dim, m.depth, m.in_channels, m.text_dim, m.text_len) == (6, 8, 2, 8, 16, 7)
    assert p.sequence.grid == [1, 3, 5]  # 96 x 160 pixels / 32, one token per latent pixel
    assert p.to_dict()["model"]["family"] == "ltx-video"  # travels in plan.json


def test_impossible_layouts_are_refused_with_the_feasible_list(tmp_path):
    # 3 heads: ulysses 4 would leave a rank without a head
    with pytest.raises(SporchError, match="feasible"):
        plan({"weights": str(folder(tmp_path, QWEN)), "text_len": 5}, dict(VERIFY, height=48, width=80),
             parallel={"ulysses": 4})


def test_unsupported_class_is_refused_at_plan_time(run_cli, tmp_path):
    root = folder(tmp_path, {"_class_name": "SanaTransformer2DModel", "num_layers": 2})
    job = tmp_path / "job.yaml"
    job.write_text("name: x\nmodel: {}\nworkload: {kind: verify, height: 64, width: 64}\n")
    code, out, err = run_cli("plan", "--cluster", "local", job, f"model.weights={root}")
    one_line_error(code, out, err, "'SanaTransformer2DModel' is not supported")


@pytest.mark.parametrize("over, needle", [
    (dict(workload=VERIFY, parallel={"cfg": 2, "ulysses": 2}), "cfg"),
])
def test_what_the_generic_path_lacks_is_refused(tmp_path, over, needle):
    model = {"weights": str(folder(tmp_path, LTX)), "text_len": 7}
    with pytest.raises(SporchError, match=needle.replace(".", r"\.")):
        plan(model, over.get("workload", VERIFY), parallel=over.get("parallel", {"ulysses": 4}))


@pytest.mark.parametrize("preset, workload, heads, depth", [
    ("qwen-image", dict(kind="benchmark", frames=1, height=1328, width=1328), 24, 60),
    ("ltx-video-2b", dict(kind="benchmark", frames=121, height=704, width=1216), 32, 28),
    ("ltx-video-13b", dict(kind="benchmark", frames=121, height=704, width=1216), 32, 48),
    ("sd3.5-large", dict(kind="benchmark", frames=1, height=1024, width=1024), 38, 38),
    ("sd3.5-medium", dict(kind="benchmark", frames=1, height=1024, width=1024), 24, 24),
    ("cogvideox-5b", dict(kind="benchmark", frames=49, height=480, width=720), 48, 42),
    ("hunyuanvideo", dict(kind="benchmark", frames=129, height=720, width=1280), 24, 20),
])
def test_published_presets_plan_on_a100x32(preset, workload, heads, depth):
    p = plan({"preset": preset}, dict(workload, steps=30, guidance_scale=1.0, dtype="bfloat16"), "a100x32")
    assert (p.model.family, p.model.num_heads, p.model.depth) == (p.model.family, heads, depth)
    assert p.model.diffusers_class and p.model.diffusers_config
    assert p.layout.world_size == 32 and p.estimates.memory.memory_bytes_per_gpu > 0
    assert p.estimates.compute.parameters > 1e9


def test_inspect_names_family_class_heads_layers_and_layouts(run_cli, tmp_path):
    """`sporch inspect` on a generic-path folder (a config and a safetensors header suffice)."""
    root = folder(tmp_path, QWEN)
    header = json.dumps({"img_in.weight": {"dtype": "F32", "shape": [48, 16], "data_offsets": [0, 3072]}}).encode()
    (root / "transformer" / "diffusion_pytorch_model.safetensors").write_bytes(
        len(header).to_bytes(8, "little") + header + bytes(3072))
    code, out, err = run_cli("inspect", root, "--json", "--gpus", "4")
    assert code == 0, err
    g = json.loads(out)["generic"]
    assert (g["family"], g["class"], g["split_plan"], g["heads"], g["layers"]) == (
        "qwen-image", "QwenImageTransformer2DModel", "the class's _cp_plan", 3, 2)
    assert g["layouts"]["4"] == ["U1R4", "U2R2"]  # 3 heads: Ulysses 4 would leave a rank without one
