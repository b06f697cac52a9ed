"""The checkpoint defines the model (issue 23 item 1): a diffusers checkpoint of a size no preset
has, named only by ``model.weights``, is planned from its config.json (no tensors loaded) and
computes what diffusers computes, unsharded and on 4 gloo ranks; a preset that disagrees with
it is refused with every disagreement in one line; a config key sporch does not know is refused
by name."""

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
from sporch.runtime.model import build_model  # noqa: E402
from sporch.runtime.model.verify import compare  # noqa: E402
from sporch.runtime.testing import run_distributed  # noqa: E402
from tests.runtime.model.published import flux_reference, randomize  # noqa: E402
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
    """A Wan and a Flux checkpoint saved by diffusers (pipeline layout: <folder>/transformer/),
    their inputs and diffusers' outputs."""
    from diffusers import FluxTransformer2DModel, WanTransformer3DModel

    root = tmp_path_factory.mktemp("odd")
    wan = randomize(WanTransformer3DModel(**WAN_ODD), 3)
    flux = randomize(FluxTransformer2DModel(**FLUX_ODD), 4)
    wan.save_pretrained(root / "wan" / "transformer")
    flux.save_pretrained(root / "flux" / "transformer")
    g = torch.Generator().manual_seed(5)
    wx = torch.randn(2, 4, 3, 6, 6, generator=g)  # 3 x 3 x 3 = 27 tokens (4 ranks do not divide it)
    wt, wtext = torch.tensor([800.0, 150.0]), torch.randn(2, TEXT_LEN, 20, generator=g)
    fx = torch.randn(2, 3, 1, 6, 6, generator=g)  # 3 latent channels packed 2 x 2 = 12, 9 tokens
    ft, ftext = torch.tensor([700.0, 200.0]), torch.randn(2, TEXT_LEN, 28, generator=g)
    pooled = torch.randn(2, 10, generator=g)
    with torch.no_grad():
        wref = wan(wx, wt, wtext, return_dict=False)[0]
    # diffusers' Flux takes one sigma per call: one call per sample
    fref = torch.cat([flux_reference(flux, fx, ft[i] / 1000, ftext, pooled, GUIDANCE)[i:i + 1] for i in range(2)])
    return dict(root=root, wan=dict(x=wx, t=wt, cond=wtext, ref=wref, guidance=1.0),
                flux=dict(x=fx, t=ft, cond={"text": ftext, "pooled": pooled}, ref=fref, guidance=GUIDANCE))


def _model_dict(plan) -> dict:
    d = plan.model.to_dict()
    return {**d, "text_len": TEXT_LEN}


def test_the_plan_comes_from_the_config_alone(odd):
    wan = _plan(str(odd["root"] / "wan"), text_len=TEXT_LEN)
    m = wan.model
    assert (m.preset, m.attention, m.depth, m.num_heads, m.head_dim, m.hidden, m.ffn_dim, m.text_dim) == \
        (None, "cross", 3, 6, 12, 72, 40, 20)
    assert m.knobs == {"out_channels": 4, "freq_dim": 32, "eps": 1e-5, "rope_max_seq_len": 64}
    flux = _plan(str(odd["root"] / "flux"), text_len=TEXT_LEN)
    f = flux.model
    assert (f.attention, f.depth, f.single_depth, f.num_heads, f.head_dim, f.in_channels, f.patch, f.text_dim) == \
        ("joint", 2, 1, 4, 20, 3, [1, 2, 2], 28)
    assert f.distilled and f.guidance_embed
    assert f.knobs == {"distilled": True, "freq_dim": 256, "pooled_dim": 10, "guidance_embed": True,
                       "rope_axes": [4, 8, 8]}


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


@pytest.mark.parametrize("family", ["wan", "flux"])
def test_the_checkpoint_alone_equals_diffusers(odd, family):
    plan = _plan(str(odd["root"] / family), text_len=TEXT_LEN)
    model = build_model(_model_dict(plan), weights=plan.model.weights)
    case = odd[family]
    with torch.no_grad():
        out = model(case["x"], case["t"], case["cond"], guidance=case["guidance"] if family == "flux" else None)
    err = compare(out, case["ref"])
    assert err["max_rel_err"] <= TOL and err["ref_max_abs"] > 0.3, err


def _sharded(cases):
    from sporch.runtime.model import ShardedDiT
    from sporch.runtime.parallel import ParallelContext

    out = {}
    for name, layout, model_dict, folder, x, t, cond, guidance in cases:
        ctx = ParallelContext.from_layout(**layout)
        model = build_model(model_dict, weights=folder)
        runner = ShardedDiT(model, ctx, grid=(x.shape[2], x.shape[3] // 2, x.shape[4] // 2))
        out[name] = runner.forward(x, t, cond, guidance_scale=guidance)
        ctx.close()
    return out


def test_the_checkpoint_alone_equals_diffusers_on_4_ranks(odd):
    cases = []
    for family in ("wan", "flux"):
        plan = _plan(str(odd["root"] / family), text_len=TEXT_LEN)
        c = odd[family]
        for name, layout in (("U4", dict(ulysses=4)), ("R4", dict(ring=4)), ("U2R2", dict(ulysses=2, ring=2))):
            cases.append((f"{family}-{name}", layout, _model_dict(plan), plan.model.weights, c["x"], c["t"],
                          c["cond"], c["guidance"]))
    results = run_distributed(_sharded, 4, cases, timeout=300)
    for rank_out in results:
        for name, out in rank_out.items():
            err = compare(out, odd[name.split("-")[0]]["ref"])
            assert err["max_rel_err"] <= TOL, (name, err)


def test_a_preset_that_disagrees_is_refused_with_every_field_in_one_line(odd, tmp_path):
    with pytest.raises(SporchError) as info:
        _plan(str(odd["root"] / "wan"), preset="wan2.1-t2v-1.3b")
    text = str(info.value)
    assert "\n" not in text and "disagrees with the job's model in 11 field(s)" in text, text
    for field in ("num_heads 6", "num_kv_heads 6", "head_dim 12", "depth 3", "ffn_dim 40", "hidden 72",
                  "text_dim 20", "freq_dim 32", "eps 1e-05", "in_channels 4", "out_channels 4"):
        assert field in text, (field, text)
    assert "drop model.preset (wan2.1-t2v-1.3b)" in text
    # through the CLI: one line, exit 2
    job = tmp_path / "job.json"
    job.write_text(json.dumps(_job(str(odd["root"] / "wan"), preset="wan2.1-t2v-1.3b")))
    proc = subprocess.run([sys.executable, "-m", "sporch.orchestrator.cli.main", "plan", "--cluster", "local",
                           str(job)], capture_output=True, text=True, cwd=ROOT)
    assert proc.returncode == 2 and proc.stderr.count("\n") == 1 and "11 field(s)" in proc.stderr, proc.stderr
    # a field given beside the checkpoint that disagrees: refused the same way
    with pytest.raises(SporchError, match=r"in 1 field\(s\): depth 3 \(job: 5"):
        _plan(str(odd["root"] / "wan"), depth=5)


@pytest.mark.parametrize("key,value,message", [
    ("cross_attn_norm", False, "cross_attn_norm=False"),
    ("pos_embed_seq_len", 514, "pos_embed_seq_len=514"),
    ("qk_norm", "layer_norm", "qk_norm='layer_norm'"),
    ("sliding_window", 128, "config key 'sliding_window' is not one sporch knows"),
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
        ("Wan2.1", "diffusers", n, {"F32": n})
    assert report["memory_per_gpu"] == {"whole": 4 * n, "sharded over 4": -(-4 * n // 4)}
    assert report["model"]["num_heads"] == 6 and report["model"]["freq_dim"] == 32
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
    assert plan.model.knobs == {"rope_max_seq_len": 1024} and plan.model.preset == "wan2.1-t2v-1.3b"


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
    with pytest.raises(SporchError, match="is not a model sporch runs.*name its preset"):
        _plan(str(folder))
    plan = _plan(str(folder), preset="tiny")
    assert plan.model.preset == "tiny" and plan.model.knobs is None
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
