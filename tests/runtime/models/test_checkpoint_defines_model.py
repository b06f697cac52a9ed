"""The checkpoint defines the model (issue 23 item 1): a diffusers checkpoint of a size no preset
has, named only by ``model.weights``, is planned from its config.json (no tensors loaded) and runs
its diffusers class sequence-parallel on 4 gloo ranks equal to the unsharded class; a preset that
disagrees with it is refused with every disagreement in one line; a config key sporch does not know
is refused by name."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
import torch

pytest.importorskip("diffusers")

from sporch.orchestrator.config.cluster import find_cluster  # noqa: E402
from sporch.orchestrator.config.job import job_from_dict  # noqa: E402
from sporch.orchestrator.errors import SporchError  # noqa: E402
from sporch.orchestrator.plan.planner import make_plan  # noqa: E402
from sporch.runtime.models.tiny_parts import randomize  # noqa: E402
from sporch.runtime.testing import run_distributed  # noqa: E402
from tests.testutil import ROOT  # noqa: E402

TOL = 1e-5
# Sizes no preset has, and the knobs the issue names set away from their defaults.
WAN_ODD = dict(patch_size=(1, 2, 2), num_attention_heads=6, attention_head_dim=12, in_channels=4, out_channels=4,
               text_dim=20, freq_dim=32, ffn_dim=40, num_layers=3, cross_attn_norm=True,
               qk_norm="rms_norm_across_heads", eps=1e-5, rope_max_seq_len=64)
FLUX_ODD = dict(patch_size=1, in_channels=12, num_layers=2, num_single_layers=1, attention_head_dim=20,
                num_attention_heads=4, joint_attention_dim=28, pooled_projection_dim=10, guidance_embeds=True,
                axes_dims_rope=(4, 8, 8))
TEXT_LEN = 6
GUIDANCE = 3.5  # Flux.1-dev's embedded guidance


def _job(weights: str, **model) -> dict:
    frames = 1 if weights.rstrip("/").endswith("flux") else 9
    return {"name": "own", "model": {"weights": weights, **model}, "parallel": {"ulysses": 1, "ring": 4},
            "workload": {"kind": "inference", "frames": frames, "height": 48, "width": 48, "dtype": "float32",
                         "guidance_scale": 1.0}}


def _plan(weights: str, **model):
    return make_plan(find_cluster("local"), job_from_dict(_job(weights, **model), "<test>"))


@pytest.fixture(scope="module")
def odd(tmp_path_factory):
    """A Wan and a Flux checkpoint saved by diffusers (pipeline layout: <folder>/transformer/)."""
    from diffusers import FluxTransformer2DModel, WanTransformer3DModel

    root = tmp_path_factory.mktemp("odd")
    randomize(WanTransformer3DModel(**WAN_ODD), 3).save_pretrained(root / "wan" / "transformer")
    randomize(FluxTransformer2DModel(**FLUX_ODD), 4).save_pretrained(root / "flux" / "transformer")
    return dict(root=root)


def test_the_plan_comes_from_the_config_alone(odd):
    wan = _plan(str(odd["root"] / "wan"), text_len=TEXT_LEN)
    m = wan.model
    assert (m.preset, m.attention, m.depth, m.num_heads, m.head_dim, m.hidden, m.ffn_dim, m.text_dim) == \
        (None, "cross", 3, 6, 12, 72, 40, 20)
    assert (m.family, m.diffusers_class) == ("wan", "WanTransformer3DModel")
    assert {k: m.diffusers_config[k] for k in ("out_channels", "freq_dim", "eps", "rope_max_seq_len")} == \
        {"out_channels": 4, "freq_dim": 32, "eps": 1e-5, "rope_max_seq_len": 64}
    flux = _plan(str(odd["root"] / "flux"), text_len=TEXT_LEN)
    f = flux.model
    assert (f.attention, f.depth, f.single_depth, f.num_heads, f.head_dim, f.in_channels, f.patch, f.text_dim) == \
        ("joint", 2, 1, 4, 20, 3, [1, 2, 2], 28)
    assert f.distilled and f.guidance_embed
    assert (f.diffusers_config["pooled_projection_dim"], list(f.diffusers_config["axes_dims_rope"])) == (10, [4, 8, 8])


def test_sporch_plan_reads_no_tensor(odd, tmp_path):
    """`sporch plan` on a folder whose weights file is not even there: the config is enough."""
    folder = tmp_path / "cfg-only" / "transformer"
    folder.mkdir(parents=True)
    (folder / "config.json").write_text((odd["root"] / "wan" / "transformer" / "config.json").read_text())
    job = tmp_path / "job.json"
    job.write_text(json.dumps(_job(str(folder.parent))))
    proc = subprocess.run([sys.executable, "-m", "sporch.orchestrator.cli.main", "plan", "--cluster", "local",
                           str(job), "--json"], capture_output=True, text=True, cwd=ROOT)
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["model"]["num_heads"] == 6


def _verify(cases):
    from sporch.orchestrator.contract.plan import Plan
    from sporch.runtime.models.workload import run_model
    from sporch.runtime.parallel import ParallelContext

    out = {}
    for name, plan_json in cases:
        plan = Plan.from_json(plan_json)
        ctx = ParallelContext.from_plan(plan)
        out[name] = run_model(plan, ctx, torch.device("cpu"))
        ctx.close()
    return out


def test_the_checkpoint_alone_runs_sequence_parallel_equal_to_its_class(odd):
    """``model.weights`` alone (no preset): verify on U4, R4 and U2R2 (27 or 9 tokens: 4 ranks do not
    divide them) loads the folder into its diffusers class and equals the unsharded class."""
    cases = []
    for family in ("wan", "flux"):
        for name, layout in (("U4", dict(ulysses=4, ring=1)), ("R4", dict(ring=4, ulysses=1)),
                             ("U2R2", dict(ulysses=2, ring=2))):
            job = _job(str(odd["root"] / family), text_len=TEXT_LEN)
            job["workload"] = {**job["workload"], "kind": "verify", "height": 48, "width": 48}
            job["parallel"] = layout
            cases.append((f"{family}-{name}", make_plan(find_cluster("local"), job_from_dict(job, "<t>")).to_json()))
    for rank_out in run_distributed(_verify, 4, cases, timeout=600):
        for name, out in rank_out.items():
            assert out["ok"] and out["max_rel_err"] <= TOL and out["forward"]["ref_max_abs"] > 0.3, (name, out)


def test_a_preset_that_disagrees_is_refused_with_every_field_in_one_line(odd, tmp_path):
    with pytest.raises(SporchError) as info:
        _plan(str(odd["root"] / "wan"), preset="wan2.1-t2v-1.3b")
    text = str(info.value)
    assert "\n" not in text and "disagrees with the job's model in" in text, text
    for field in ("num_heads 6", "num_kv_heads 6", "head_dim 12", "depth 3", "ffn_dim 40", "hidden 72",
                  "text_dim 20", "freq_dim 32", "eps 1e-05", "in_channels 4", "out_channels 4"):
        assert field in text, (field, text)
    assert "drop model.preset (wan2.1-t2v-1.3b)" in text
    # through the CLI: one line, exit 2
    job = tmp_path / "job.json"
    job.write_text(json.dumps(_job(str(odd["root"] / "wan"), preset="wan2.1-t2v-1.3b")))
    proc = subprocess.run([sys.executable, "-m", "sporch.orchestrator.cli.main", "plan", "--cluster", "local",
                           str(job)], capture_output=True, text=True, cwd=ROOT)
    assert proc.returncode == 2 and proc.stderr.count("\n") == 1 and "field(s)" in proc.stderr, proc.stderr
    # a field given beside the checkpoint that disagrees: refused the same way
    with pytest.raises(SporchError, match=r"in 1 field\(s\): depth 3 \(job: 5"):
        _plan(str(odd["root"] / "wan"), depth=5)


@pytest.mark.parametrize("key,value,message", [
    ("cross_attn_norm", "no", "cross_attn_norm: 'no' must be true or false"),
    ("qk_norm", "layer_norm", "qk_norm: 'layer_norm' must be one of 'rms_norm_across_heads'"),
    ("sliding_window", 128, "sliding_window: is not a WanTransformer3DModel config key sporch knows"),
])
def test_a_config_sporch_cannot_compute_is_refused_by_name(odd, tmp_path, key, value, message):
    folder = tmp_path / "ckpt" / "transformer"
    folder.mkdir(parents=True)
    config = json.loads((odd["root"] / "wan" / "transformer" / "config.json").read_text())
    (folder / "config.json").write_text(json.dumps({**config, key: value}))
    with pytest.raises(SporchError, match="sporch") as info:
        _plan(str(folder.parent))
    assert message in str(info.value)


def test_a_grid_past_rope_max_seq_len_is_refused(odd):
    job = _job(str(odd["root"] / "wan"))
    job["workload"].update(height=16 * 65, width=16)  # 65 rows of tokens > 64
    with pytest.raises(SporchError, match="rope_max_seq_len 64"):
        make_plan(find_cluster("local"), job_from_dict(job, "<test>"))


def _inspect(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "sporch.orchestrator.cli.main", "inspect", *args],
                          capture_output=True, text=True, cwd=ROOT)


def test_inspect_reports_the_checkpoint_from_its_headers(odd):
    from diffusers import WanTransformer3DModel

    proc = _inspect(str(odd["root"] / "wan"), "--json", "--gpus", "1,4")
    assert proc.returncode == 0, proc.stderr
    report = json.loads(proc.stdout)
    n = sum(p.numel() for p in WanTransformer3DModel(**WAN_ODD).parameters())
    assert (report["family"], report["format"], report["parameters"], report["dtypes"]) == \
        ("Wan2.1 / Wan2.2", "diffusers", n, {"F32": n})
    assert report["memory_per_gpu"] == {"whole": 4 * n, "sharded over 4": -(-4 * n // 4)}
    assert report["model"]["num_heads"] == 6 and report["model"]["ffn_dim"] == 40
    assert report["presets"] == [] and report["nearest"]["preset"].startswith("wan2.1-")
    assert any(d.startswith("num_heads 6 (preset: ") for d in report["nearest"]["differences"])
    text = _inspect(str(odd["root"] / "flux"))
    assert text.returncode == 0 and "Flux.1, diffusers" in text.stdout, text.stderr


def test_the_published_flux_configs_match_their_presets(tmp_path):
    """Flux.1-dev's and -schnell's transformer configs (as published): their presets, nothing else."""
    from safetensors.torch import save_file

    for name, guidance in (("flux.1-dev", True), ("flux.1-schnell", False)):
        folder = tmp_path / name / "transformer"
        folder.mkdir(parents=True)
        (folder / "config.json").write_text(json.dumps({
            "_class_name": "FluxTransformer2DModel", "_diffusers_version": "0.30.0.dev0", "attention_head_dim": 128,
            "axes_dims_rope": [16, 56, 56], "guidance_embeds": guidance, "in_channels": 64,
            "joint_attention_dim": 4096, "num_attention_heads": 24, "num_layers": 19, "num_single_layers": 38,
            "patch_size": 1, "pooled_projection_dim": 768}))
        save_file({"x_embedder.weight": torch.zeros(1)}, str(folder / "diffusion_pytorch_model.safetensors"))
        report = json.loads(_inspect(str(folder.parent), "--json").stdout)
        assert report["presets"] == [name], report


def test_inspect_names_the_preset_a_published_config_matches(tmp_path):
    """The Wan2.1 T2V 1.3B config (as published) beside a stand-in weights file: its preset."""
    from safetensors.torch import save_file

    folder = tmp_path / "Wan2.1-T2V-1.3B-Diffusers" / "transformer"
    folder.mkdir(parents=True)
    (folder / "config.json").write_text(json.dumps({
        "_class_name": "WanTransformer3DModel", "_diffusers_version": "0.33.0", "added_kv_proj_dim": None,
        "attention_head_dim": 128, "cross_attn_norm": True, "eps": 1e-06, "ffn_dim": 8960, "freq_dim": 256,
        "image_dim": None, "in_channels": 16, "num_attention_heads": 12, "num_layers": 30, "out_channels": 16,
        "patch_size": [1, 2, 2], "qk_norm": "rms_norm_across_heads", "rope_max_seq_len": 1024, "text_dim": 4096}))
    save_file({"patch_embedding.weight": torch.zeros(2, 2, dtype=torch.bfloat16)},
              str(folder / "diffusion_pytorch_model.safetensors"))
    report = json.loads(_inspect(str(folder.parent), "--json").stdout)
    assert report["presets"] == ["wan2.1-t2v-1.3b"] and report["nearest"] is None
    assert report["dtypes"] == {"BF16": 4} and report["bytes"] == 8
    # and a job naming that preset with this checkpoint plans without complaint
    plan = make_plan(find_cluster("local"), job_from_dict(
        {**_job(str(folder.parent), preset="wan2.1-t2v-1.3b"), "parallel": {"ulysses": 4, "ring": 1}}, "<test>"))
    assert plan.model.diffusers_config["rope_max_seq_len"] == 1024 and plan.model.preset == "wan2.1-t2v-1.3b"


def test_inspect_bad_input_is_one_line(tmp_path):
    proc = _inspect(str(tmp_path / "nothing"))
    assert proc.returncode == 2 and proc.stderr.count("\n") == 1 and "does not exist" in proc.stderr, proc.stderr
    proc = _inspect(str(tmp_path), "--gpus", "x")
    assert proc.returncode == 2 and "--gpus" in proc.stderr, proc.stderr


def test_a_config_of_no_known_model_is_left_to_the_preset(tmp_path):
    """An empty or foreign config.json: without a preset, one line asking for one; with a preset,
    the preset says what the model is (the loader checks the tensors)."""
    from safetensors.torch import save_file

    folder = tmp_path / "ckpt"
    folder.mkdir()
    (folder / "config.json").write_text("{}")
    save_file({"x": torch.zeros(1)}, str(folder / "model.safetensors"))
    with pytest.raises(SporchError, match="is not a model sporch runs"):
        _plan(str(folder))
    plan = _plan(str(folder), preset="tiny")
    assert plan.model.preset == "tiny" and plan.model.diffusers_class == "WanTransformer3DModel"
    report = json.loads(_inspect(str(folder), "--json").stdout)
    assert report["model"] is None and "is not a model sporch runs" in report["config_note"]


def _ti2v_folder(root, expand: bool = True):
    """The published Wan2.2-TI2V-5B-Diffusers configs (transformer, VAE, model_index.json) beside a
    stand-in weights file."""
    from safetensors.torch import save_file

    (root / "transformer").mkdir(parents=True)
    (root / "vae").mkdir()
    (root / "transformer" / "config.json").write_text(json.dumps({
        "_class_name": "WanTransformer3DModel", "_diffusers_version": "0.35.0.dev0", "added_kv_proj_dim": None,
        "attention_head_dim": 128, "cross_attn_norm": True, "eps": 1e-06, "ffn_dim": 14336, "freq_dim": 256,
        "image_dim": None, "in_channels": 48, "num_attention_heads": 24, "num_layers": 30, "out_channels": 48,
        "patch_size": [1, 2, 2], "pos_embed_seq_len": None, "qk_norm": "rms_norm_across_heads",
        "rope_max_seq_len": 1024, "text_dim": 4096}))
    (root / "vae" / "config.json").write_text(json.dumps({
        "_class_name": "AutoencoderKLWan", "base_dim": 160, "decoder_base_dim": 256, "z_dim": 48,
        "dim_mult": [1, 2, 4, 4], "num_res_blocks": 2, "temperal_downsample": [False, True, True],
        "is_residual": True, "in_channels": 12, "out_channels": 12, "patch_size": 2,
        "scale_factor_spatial": 16, "scale_factor_temporal": 4}))
    (root / "model_index.json").write_text(json.dumps({
        "_class_name": "WanPipeline", "boundary_ratio": None, "expand_timesteps": expand,
        "transformer": ["diffusers", "WanTransformer3DModel"], "transformer_2": [None, None],
        "vae": ["diffusers", "AutoencoderKLWan"]}))
    save_file({"patch_embedding.weight": torch.zeros(2, 2, dtype=torch.bfloat16)},
              str(root / "transformer" / "diffusion_pytorch_model.safetensors"))
    return root


def test_the_published_ti2v_folder_is_its_preset(tmp_path):
    """Wan2.2 TI2V-5B's folder: inspect names wan2.2-ti2v-5b; the folder alone plans one timestep
    per token and the Wan2.2 VAE's strides 4 x 16 x 16 (vae/config.json); a folder without
    expand_timesteps is not that preset."""
    folder = _ti2v_folder(tmp_path / "Wan2.2-TI2V-5B-Diffusers")
    report = json.loads(_inspect(str(folder), "--json").stdout)
    assert report["presets"] == ["wan2.2-ti2v-5b"] and report["expand_timesteps"] is True
    workload = {"kind": "generate", "frames": 121, "height": 704, "width": 1280, "prompt": "a cat"}
    job = {"name": "ti2v", "model": {"weights": str(folder)}, "workload": workload}
    plan = make_plan(find_cluster("h100x64"), job_from_dict(job, "<test>"))
    assert plan.model.expand_timesteps and plan.model.vae_stride == [4, 16, 16]
    assert list(plan.sequence.grid) == [31, 22, 40]
    named = make_plan(find_cluster("h100x64"), job_from_dict(
        {**job, "model": {"weights": str(folder), "preset": "wan2.2-ti2v-5b"}}, "<test>"))
    assert named.model.expand_timesteps and named.model.preset == "wan2.2-ti2v-5b"
    other = _ti2v_folder(tmp_path / "no-expand", expand=False)
    report = json.loads(_inspect(str(other), "--json").stdout)
    assert report["presets"] == [] and report["nearest"]["preset"] == "wan2.2-ti2v-5b"
    assert report["nearest"]["differences"] == ["expand_timesteps False (preset: True, model_index.json)"]
