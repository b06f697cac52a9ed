"""Wan2.2 A14B's two experts in the plan (torch-free): the boundary from the preset or the
folder's model_index.json, the bad combinations refused in one line (exit 2), and the memory
of both experts resident or one offloaded with the switch's copy time."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest

from sporch.orchestrator.config.cluster import find_cluster
from sporch.orchestrator.config.job import job_from_dict
from sporch.orchestrator.errors import SporchError
from sporch.orchestrator.plan.experts import HOST_GB_PER_S
from sporch.orchestrator.plan.planner import make_plan
from tests.cli.test_bad_input_hardening import one_line_error

# a tiny diffusers Wan transformer config (the shape of the "tiny" preset's Wan sizes)
CONFIG = {"_class_name": "WanTransformer3DModel", "num_attention_heads": 4, "attention_head_dim": 16,
          "num_layers": 2, "ffn_dim": 64, "in_channels": 4, "out_channels": 4, "patch_size": [1, 2, 2],
          "text_dim": 32, "freq_dim": 256, "eps": 1e-6, "qk_norm": "rms_norm_across_heads", "cross_attn_norm": True}
INDEX = {"_class_name": "WanPipeline", "transformer": ["diffusers", "WanTransformer3DModel"],
         "transformer_2": ["diffusers", "WanTransformer3DModel"], "boundary_ratio": 0.875}
GENERATE = dict(kind="generate", prompt="a cat", frames=9, height=64, width=64, steps=4, guidance_scale=4.0,
                dtype="bfloat16")


#: the published A14B experts' transformer config (the Wan2.1-14B shape)
A14B = dict(CONFIG, num_attention_heads=40, attention_head_dim=128, num_layers=40, ffn_dim=13824, in_channels=16,
            out_channels=16, text_dim=4096)


def folder(tmp_path: Path, index: dict | None = None, second: dict | None = CONFIG, name: str = "w22",
           first: dict = CONFIG) -> Path:
    root = tmp_path / name
    for sub, cfg in (("transformer", first), ("transformer_2", second)):
        if cfg is not None:
            (root / sub).mkdir(parents=True)
            (root / sub / "config.json").write_text(json.dumps(cfg))
    (root / "model_index.json").write_text(json.dumps(INDEX if index is None else index))
    return root


def plan(model: dict, workload: dict = GENERATE, cluster: str = "local", **extra):
    return make_plan(find_cluster(cluster), job_from_dict({"name": "w22", "model": model, "workload": workload,
                                                           **extra}))


def test_presets_carry_the_published_boundaries():
    t2v = plan({"preset": "wan2.2-t2v-a14b"}, dict(GENERATE, height=720, width=1280, frames=81), "a100x8",
               parallel={"ulysses": 8})
    i2v = plan({"preset": "wan2.2-i2v-a14b"}, dict(GENERATE, kind="benchmark", prompt=None), "a100x8",
               parallel={"ulysses": 8})
    assert (t2v.model.boundary_ratio, t2v.model.experts) == (0.875, 2)
    assert (i2v.model.boundary_ratio, i2v.model.in_channels, i2v.model.hidden, i2v.model.depth) == (0.9, 36, 5120, 40)
    w21 = plan({"preset": "wan2.1-t2v-14b"}, dict(GENERATE, height=720, width=1280, frames=81), "a100x8",
               parallel={"ulysses": 8})
    # the A14B experts have the Wan2.1-14B shape: twice its parameter bytes when both are resident
    assert t2v.estimates.compute.parameters == w21.estimates.compute.parameters
    assert t2v.estimates.memory.parameter_bytes_per_gpu == 2 * w21.estimates.memory.parameter_bytes_per_gpu
    assert t2v.estimates.experts is not None and w21.estimates.experts is None


def test_folder_defines_two_experts(tmp_path):
    p = plan({"weights": str(folder(tmp_path))})
    assert p.model.boundary_ratio == 0.875 and p.model.hidden == 64 and p.model.experts == 2
    assert p.to_dict()["model"]["boundary_ratio"] == 0.875  # travels in plan.json to the runtime
    one = plan({"weights": str(folder(tmp_path, dict(INDEX, transformer_2=[None, None], boundary_ratio=None),
                                      second=None, name="one"))})
    assert one.model.boundary_ratio is None and one.model.experts == 1


def test_resident_or_offload_memory_and_switch_cost(tmp_path):
    w = str(folder(tmp_path))
    resident = plan({"weights": w}, pipeline={"experts": "resident"})
    offload = plan({"weights": w}, pipeline={"experts": "offload"})
    r, o = resident.estimates, offload.estimates
    one = r.experts.expert_bytes_per_gpu
    assert one == r.weights.parameter_bytes_sharded > 0
    assert (resident.placement.experts, offload.placement.experts) == ("resident", "offload")
    assert r.memory.dit_memory_bytes_per_gpu - o.memory.dit_memory_bytes_per_gpu == one  # the second expert's bytes
    assert r.experts.switch_bytes_per_gpu == 0
    assert o.experts.switch_bytes_per_gpu == 2 * one  # one expert in, the other out
    assert o.experts.host_gb_per_s_source == "default"
    assert o.experts.switch_s == pytest.approx(2 * one / (HOST_GB_PER_S * 1e9), abs=1e-6)


def test_the_switch_is_in_the_predicted_job_time():
    big = dict(GENERATE, height=720, width=1280, frames=81, guidance_scale=4.0)
    plans = [plan({"preset": "wan2.2-t2v-a14b"}, big, "a100x8", parallel={"ulysses": 8}, pipeline={"experts": e})
             for e in ("resident", "offload")]
    pr, po = (p.estimates.predicted for p in plans)
    switch = plans[1].estimates.experts.switch_s
    assert pr.switch_s == 0 and switch > 1 and po.switch_s == pytest.approx(switch, abs=1e-6)
    assert po.step_s == pytest.approx(pr.step_s, rel=1e-12)  # same steps: the job is longer by the switch
    assert po.generation_s - pr.generation_s == pytest.approx(switch, rel=1e-6)
    # the whole job: the switch, less the second expert's copy at load (offloaded, it stays in host memory)
    copy = plans[0].estimates.experts.expert_bytes_per_gpu / (plans[0].estimates.experts.host_gb_per_s * 1e9)
    assert po.job_s - pr.job_s == pytest.approx(switch - copy, rel=1e-5)


def test_the_switch_is_not_fitted_away(tmp_path):
    """Calibration on job times of offloaded two-expert runs subtracts the switch: measured =
    the prediction with known constants -> the fit gives back those constants."""
    from sporch.orchestrator.plan.calibration import Observation, _fit
    from sporch.orchestrator.plan.cost import predict
    from sporch.orchestrator.plan.cost_constants import cluster_constants
    from sporch.orchestrator.plan.cost_inputs import inputs_from_plan

    w = str(folder(tmp_path))
    big = {"weights": w}
    plans = [plan(big, dict(GENERATE, steps=s), pipeline={"experts": "offload"}) for s in (2, 4, 8)]
    base = cluster_constants(plans[0].cluster)[0]
    truth = dict(base, layer_overhead_s=base["layer_overhead_s"] * 3)
    x = [dataclasses.replace(inputs_from_plan(p), switch_s=0.05) for p in plans]  # a slow host link
    obs = tuple(Observation(inputs=xi, measured_s=predict(xi, truth).generation_s, level="job", label=f"p{i}")
                for i, xi in enumerate(x))
    fit = _fit(obs, base, ["layer_overhead_s"])
    assert fit.constants["layer_overhead_s"] == pytest.approx(truth["layer_overhead_s"], rel=1e-6)


def test_auto_offloads_only_when_both_do_not_fit(tmp_path):
    big = dict(GENERATE, height=720, width=1280, frames=81, guidance_scale=4.0, guidance_scale_2=3.0)
    fits = plan({"preset": "wan2.2-t2v-a14b"}, big, "a100x8", parallel={"ulysses": 8})
    assert fits.placement.experts == "resident" and fits.estimates.memory.fits
    tight = plan({"preset": "wan2.2-t2v-a14b"}, big, "a100-40gx32", parallel={"ulysses": 8})
    assert tight.placement.experts == "offload" and "the idle expert in host memory" in tight.placement.reason
    assert tight.workload.guidance_scale_2 == 3.0


def test_cluster_host_bandwidth_is_used(tmp_path, run_cli):
    cluster = tmp_path / "box.yaml"
    cluster.write_text("name: box\nnodes: 1\ngpus_per_node: 4\ngpu: {model: cpu, memory_gib: 8, bf16_tflops: 0.2, "
                       "host_gb_per_s: 10}\nintra_node: {fabric: pcie, gb_per_s: 5}\n"
                       "inter_node: {fabric: ethernet, gb_per_s: 1, nics_per_node: 1}\n")
    job = tmp_path / "job.yaml"
    job.write_text(json.dumps({"name": "w22", "model": {"weights": str(folder(tmp_path))}, "workload": GENERATE,
                               "pipeline": {"experts": "offload"}}))
    code, out, err = run_cli("plan", "--cluster", cluster, job, "--json")
    assert code == 0, err
    x = json.loads(out)["estimates"]["experts"]
    assert (x["host_gb_per_s"], x["host_gb_per_s_source"]) == (10, "cluster")
    code, out, err = run_cli("plan", "--cluster", cluster, job)
    assert "expert switch" in out and "10 GB/s host <-> GPU (cluster gpu.host_gb_per_s)" in out


@pytest.mark.parametrize("index,second,needle", [
    (dict(INDEX, boundary_ratio=1.5), CONFIG, "boundary_ratio 1.5 must be a number strictly between 0 and 1"),
    (dict(INDEX, boundary_ratio=0), CONFIG, "boundary_ratio 0 must be a number strictly between 0 and 1"),
    (INDEX, None, "transformer_2/config.json is missing"),
    (dict(INDEX, boundary_ratio=None), CONFIG, "lists transformer_2 but sets no boundary_ratio"),
    (dict(INDEX, transformer_2=[None, None]), None, "sets boundary_ratio 0.875 but lists no transformer_2"),
    (INDEX, dict(CONFIG, num_layers=3, ffn_dim=32), "differs from transformer's in 2 config key(s): ffn_dim 32 (transformer: 64); num_layers 3"),
    (dict(INDEX, expand_timesteps="yes"), CONFIG, "expand_timesteps 'yes' must be true or false"),
])
def test_bad_folders_are_one_line_errors(tmp_path, run_cli, index, second, needle):
    job = tmp_path / "job.yaml"
    job.write_text(json.dumps({"name": "w22", "model": {"weights": str(folder(tmp_path, index, second))},
                               "workload": GENERATE}))
    code, out, err = run_cli("plan", "--cluster", "local", job)
    one_line_error(code, out, err, needle)


@pytest.mark.parametrize("model,workload,extra,needle", [
    ({"preset": "tiny"}, dict(GENERATE, guidance_scale_2=3.0), {}, "workload.guidance_scale_2 is the low-noise"),
    ({"preset": "tiny"}, GENERATE, {"pipeline": {"experts": "offload"}}, "pipeline.experts places two experts"),
    ({"preset": "tiny"}, dict(GENERATE, guidance_scale_2=-1.0), {}, "workload.guidance_scale_2"),
    ({"preset": "tiny"}, GENERATE, {"pipeline": {"experts": "gpu"}}, "pipeline.experts"),
])
def test_expert_keys_on_one_transformer_are_refused(tmp_path, run_cli, model, workload, extra, needle):
    job = tmp_path / "job.yaml"
    job.write_text(json.dumps({"name": "w22", "model": model, "workload": workload, **extra}))
    code, out, err = run_cli("plan", "--cluster", "local", job)
    one_line_error(code, out, err, needle)


def test_preset_and_folder_must_agree_on_the_experts(tmp_path):
    two = str(folder(tmp_path, second=A14B, first=A14B))
    one = str(folder(tmp_path, dict(INDEX, transformer_2=[None, None], boundary_ratio=None), None, "one", A14B))
    with pytest.raises(SporchError, match="holds two experts .* but model.preset wan2.1-t2v-14b has one"):
        plan({"preset": "wan2.1-t2v-14b", "weights": two})
    with pytest.raises(SporchError, match="model.preset wan2.2-t2v-a14b has two experts .* no pipeline folder"):
        plan({"preset": "wan2.2-t2v-a14b", "weights": one})
    with pytest.raises(SporchError, match="boundary_ratio 0.7 disagrees with model.preset wan2.2-t2v-a14b"):
        plan({"preset": "wan2.2-t2v-a14b", "weights": str(folder(tmp_path, dict(INDEX, boundary_ratio=0.7), A14B,
                                                                 "b07", A14B))})
    # the published folder's layout and boundary: planned from the folder alone, or with its preset
    alone = plan({"weights": two}, dict(GENERATE, height=720, width=1280, frames=81), "a100x8",
                 parallel={"ulysses": 8})
    named = plan({"preset": "wan2.2-t2v-a14b", "weights": two}, dict(GENERATE, height=720, width=1280, frames=81),
                 "a100x8", parallel={"ulysses": 8})
    assert alone.model.boundary_ratio == named.model.boundary_ratio == 0.875
    assert alone.estimates.memory.parameter_bytes_per_gpu == named.estimates.memory.parameter_bytes_per_gpu


def test_image_to_video_needs_its_first_frame(tmp_path, run_cli):
    """An image-to-video folder (more input than output channels, no CLIP image encoder) plans
    with workload.image; without it, or an image for a text-to-video model, is one line, exit 2."""
    i2v = folder(tmp_path, second=dict(CONFIG, in_channels=12), first=dict(CONFIG, in_channels=12), name="i2v")
    image = tmp_path / "first.png"
    image.write_bytes(b"not read when planning")
    p = plan({"weights": str(i2v)}, dict(GENERATE, image=str(image)))
    assert p.workload.image == str(image) and p.model.in_channels == 12 and p.model.experts == 2
    named = plan({"preset": "wan2.2-i2v-a14b"}, dict(GENERATE, image="first.png", height=480, width=832),
                 "a100x8", parallel={"ulysses": 8}, source=str(tmp_path / "job.yaml"))
    assert named.workload.image == str(tmp_path / "first.png")  # relative to the job file's folder
    for model, workload, needle in (
            ({"weights": str(i2v)}, GENERATE, "is image-to-video: set workload.image"),
            ({"weights": str(folder(tmp_path, name="t2v"))}, dict(GENERATE, image=str(image)),
             "workload.image is the first frame of an image-to-video generate job"),
            ({"preset": "tiny"}, dict(GENERATE, image=""), "workload.image")):
        job = tmp_path / "job.yaml"
        job.write_text(json.dumps({"name": "w22", "model": model, "workload": workload}))
        code, out, err = run_cli("plan", "--cluster", "local", job)
        one_line_error(code, out, err, needle)


def _header_only_safetensors(path: Path) -> None:
    import struct

    header = json.dumps({"x": {"dtype": "F32", "shape": [1], "data_offsets": [0, 4]}}).encode()
    path.write_bytes(struct.pack("<Q", len(header)) + header + b"\0" * 4)


def test_inspect_names_the_experts_and_the_wan22_preset(tmp_path, run_cli):
    two = folder(tmp_path, second=A14B, first=A14B)
    one = folder(tmp_path, dict(INDEX, transformer_2=[None, None], boundary_ratio=None), None, "one", A14B)
    for root in (two, one):
        _header_only_safetensors(root / "transformer" / "diffusion_pytorch_model.safetensors")
    code, out, err = run_cli("inspect", two, "--json")
    assert code == 0, err
    report = json.loads(out)
    assert report["experts"]["boundary_ratio"] == 0.875 and report["presets"] == ["wan2.2-t2v-a14b"]
    code, out, err = run_cli("inspect", one, "--json")
    report = json.loads(out)
    assert report["experts"] is None and report["presets"] == ["wan2.1-t2v-14b"]
    code, out, err = run_cli("inspect", two)
    assert "boundary_ratio 0.875; parameter figures are per expert" in " ".join(out.split())
