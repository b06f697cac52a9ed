from __future__ import annotations

import math

import pytest

from sporch.orchestrator.config.job import job_from_dict, load_job
from sporch.orchestrator.config.job_spec import ModelSpec
from sporch.orchestrator.plan.resolve import resolve_model
from sporch.orchestrator.plan.sequence_shape import sequence_shape
from sporch.orchestrator.config.presets import PRESETS
from sporch.orchestrator.errors import SporchError
from tests.testutil import EXAMPLES, write


def model(**kw):
    return resolve_model(ModelSpec(**kw))


@pytest.mark.parametrize(
    "preset,depth,single,hidden,heads,hd,ffn",
    [
        ("wan2.1-t2v-1.3b", 30, 0, 1536, 12, 128, 8960),
        ("wan2.1-t2v-14b", 40, 0, 5120, 40, 128, 13824),
        ("flux.1-dev", 19, 38, 3072, 24, 128, 12288),
        ("hunyuanvideo", 20, 40, 3072, 24, 128, 12288),
        ("cogvideox-5b", 42, 0, 3072, 48, 64, 12288),
        ("tiny", 2, 0, 64, 4, 16, 128),
        ("tiny-flux", 1, 1, 64, 4, 16, 256),
    ],
)
def test_preset_shapes(preset, depth, single, hidden, heads, hd, ffn):
    m = model(preset=preset)
    assert (m.depth, m.single_depth, m.hidden, m.num_heads, m.head_dim, m.ffn_dim) == (
        depth, single, hidden, heads, hd, ffn,
    )
    assert m.hidden == m.num_heads * m.head_dim
    assert m.num_kv_heads == heads


def test_preset_details():
    wan = model(preset="wan2.1-t2v-14b")
    assert wan.patch == [1, 2, 2] and wan.vae_stride == [4, 8, 8]
    assert (wan.in_channels, wan.text_len, wan.text_dim, wan.attention) == (16, 512, 4096, "cross")
    flux = model(preset="flux.1-dev")
    assert flux.attention == "joint" and flux.text_len == 512 and flux.vae_stride == [1, 8, 8]
    assert model(preset="flux.1-schnell").text_len == 256 and model(preset="cogvideox-5b").text_len == 226
    assert model(preset="wan2.2-ti2v-5b").vae_stride == [4, 16, 16]
    assert set(PRESETS) >= {"wan2.1-t2v-1.3b", "wan2.1-t2v-14b", "flux.1-dev", "hunyuanvideo", "cogvideox-5b",
                            "tiny", "tiny-flux"}


def test_overrides_on_preset():
    """A preset's sizes change where its class's config can say them: the config follows."""
    m = model(preset="tiny", num_heads=8)
    assert (m.hidden, m.num_heads, m.head_dim, m.num_kv_heads) == (64, 8, 8, 8)
    assert (m.diffusers_config["num_attention_heads"], m.diffusers_config["attention_head_dim"]) == (8, 8)
    m = model(preset="tiny", head_dim=32)
    assert (m.num_heads, m.hidden) == (2, 64)
    m = model(preset="tiny", num_heads=8, head_dim=16)
    assert m.hidden == 128 and m.ffn_dim == 256 and m.diffusers_config["ffn_dim"] == 256  # preset ratio kept
    m = model(preset="tiny", mlp_ratio=4.0)
    assert m.ffn_dim == 256
    m = model(preset="tiny-flux", single_depth=3)
    assert m.single_depth == 3 and m.diffusers_config["num_single_layers"] == 3
    m = model(preset="tiny", patch=4)
    assert m.patch == [1, 4, 4] and m.diffusers_config["patch_size"] == [1, 4, 4]
    m = model(preset="wan2.1-t2v-14b", depth=4)
    assert m.diffusers_config["num_layers"] == 4 and m.diffusers_config["in_channels"] == 16


@pytest.mark.parametrize("kw,needle", [
    (dict(preset="tiny", num_kv_heads=2), "model.num_kv_heads=2 (WanTransformer3DModel gives 4)"),
    (dict(preset="tiny", attention="joint"), "model.attention='joint' (WanTransformer3DModel gives 'cross')"),
    (dict(preset="tiny-flux", mlp_ratio=2.0), "model.ffn_dim=128 (FluxTransformer2DModel gives 256)"),
    (dict(preset="qwen-image", depth=10), "model.depth=10 (the preset's: 60)"),
])
def test_an_override_the_class_cannot_express_is_refused(kw, needle):
    with pytest.raises(SporchError) as ei:
        model(**kw)
    assert needle in str(ei.value) and "\n" not in str(ei.value)


@pytest.mark.parametrize(
    "kw,needle",
    [
        (dict(preset="nope"), "presets: wan2.1-t2v-1.3b"),
        (dict(preset="tiny", hidden=64, num_heads=4, head_dim=32), "hidden 64 != num_heads 4 x head_dim 32"),
        (dict(preset="tiny", num_heads=3), "not divisible by num_heads 3"),
        (dict(preset="tiny", num_kv_heads=3), "num_kv_heads 3 must divide num_heads 4"),
        (dict(preset="tiny", attention="sparse"), "model.attention"),
        (dict(preset="tiny", single_depth=2), "needs attention: joint"),
        (dict(preset="tiny", patch=[1, 2]), None),
        (dict(preset="tiny", patch="big"), "model.patch"),
        (dict(preset="tiny", ffn_dim=10, mlp_ratio=2.0), "both given"),
        (dict(preset="tiny", vae_stride=[8, 8]), "model.vae_stride must be three positive ints [temporal, height"),
        (dict(preset="tiny", vae_stride=8), "got 8"),
        (dict(attention="cross", depth=2, hidden=64), "model.num_heads"),
    ],
)
def test_model_errors(kw, needle):
    if needle is None:
        assert model(**kw).patch == [1, 1, 2]
        return
    with pytest.raises(SporchError) as ei:
        model(**kw)
    assert needle in str(ei.value)


@pytest.mark.parametrize("value", ["[8, 8]", "[4, 8, 8, 1]", "[0, 8, 8]", "[4, -8, 8]", "[4, 8.5, 8]", "8", "[]",
                                   "fast", "{t: 4}"])
def test_vae_stride_must_be_three_positive_ints_at_load(tmp_path, value):
    """Two strides would silently drop the time stride (a video model would plan 4x the frames)."""
    p = write(tmp_path, "j.yaml", f"model: {{preset: tiny, vae_stride: {value}}}\n"
                                  "workload: {frames: 9, height: 64, width: 64}\n")
    with pytest.raises(SporchError) as ei:
        load_job(p)
    msg = str(ei.value)
    assert "'model.vae_stride' must be three positive ints [temporal, height, width]" in msg and "\n" not in msg
    with pytest.raises(SporchError, match="'model.vae_stride' must be three"):
        load_job(EXAMPLES / "tiny.yaml", [f"model.vae_stride={value.replace(' ', '')}"])
    assert load_job(write(tmp_path, "ok.yaml", "model: {preset: tiny, vae_stride: [2, 8, 8]}\n"
                                     "workload: {frames: 9, height: 64, width: 64}\n")).model.vae_stride == [2, 8, 8]


def test_model_without_preset():
    """A model given by its shape runs as the family of its attention kind (joint: Flux), the rest
    (the feed-forward width, q/k norms) from that class's defaults."""
    m = model(attention="joint", depth=2, single_depth=1, hidden=96, num_heads=6, patch=[1, 2, 2],
              in_channels=4, vae_stride=[1, 8, 8], text_len=16)
    assert m.preset is None and m.head_dim == 16 and m.num_kv_heads == 6 and m.ffn_dim == 384
    assert (m.family, m.diffusers_class) == ("flux", "FluxTransformer2DModel")
    with pytest.raises(SporchError) as ei:
        model(depth=2)
    msg = str(ei.value)
    for key in ("model.attention", "model.hidden", "model.num_heads", "model.patch"):
        assert key in msg


def test_wan14b_720p_sequence():
    job = load_job(EXAMPLES / "wan14b-720p.yaml")
    m = resolve_model(job.model)
    n, grid = sequence_shape(m, job.workload)
    assert grid == [21, 45, 80] and n == 75_600


def test_image_and_seq_len_shapes():
    flux = model(preset="flux.1-dev")
    job = job_from_dict({"model": {"preset": "flux.1-dev"}, "workload": {"height": 1024, "width": 1024}})
    assert sequence_shape(flux, job.workload) == (4096, [1, 64, 64])
    job = job_from_dict({"model": {"preset": "tiny"}, "workload": {"seq_len": 1000}})
    assert sequence_shape(model(preset="tiny"), job.workload) == (1000, [1, 25, 40])


def test_seq_len_grid_stays_within_the_rope_table():
    tiny = model(preset="tiny")
    limit = tiny.diffusers_config["rope_max_seq_len"]
    job = job_from_dict({"model": {"preset": "tiny"}, "workload": {"seq_len": 2 * limit + 2}})
    n, grid = sequence_shape(tiny, job.workload)  # 2 x 1025 = 2 x 5^2 x 41: one frame [1, 41, 50]
    assert n == grid[0] * grid[1] * grid[2] and max(grid) <= limit
    prime = next(p for p in range(limit + 1, 2 * limit) if all(p % d for d in range(2, math.isqrt(p) + 1)))
    job = job_from_dict({"model": {"preset": "tiny"}, "workload": {"seq_len": prime}})
    with pytest.raises(SporchError, match=f"seq_len {prime} has no token grid.*e.g. {prime - 1} or {prime + 1}"):
        sequence_shape(tiny, job.workload)


@pytest.mark.parametrize(
    "w,needle",
    [
        ({"frames": 80, "height": 720, "width": 1280}, "77 or 81"),
        ({"frames": 81, "height": 721, "width": 1280}, "workload.height 721 must be a multiple of VAE stride 8 x patch 2"),
        ({"frames": 81, "height": 720, "width": 1000}, "workload.width"),
    ],
)
def test_shape_divisibility(w, needle):
    job = job_from_dict({"model": {"preset": "wan2.1-t2v-14b"}, "workload": w})
    with pytest.raises(SporchError) as ei:
        sequence_shape(resolve_model(job.model), job.workload)
    assert needle in str(ei.value)


def test_overrides_and_interpolation(tmp_path):
    p = write(tmp_path, "j.yaml", """
model: {preset: tiny}
workload: {frames: 9, height: 64, width: '${workload.height}', steps: 2}
parallel: {ring: 2}
""")
    job = load_job(p, ["parallel.ring=auto", "workload.batch=4", "model.preset=tiny-flux", "resources.time=00:05:00"])
    assert job.name == "j"
    assert job.workload.width == 64 and job.workload.batch == 4
    assert job.parallel.ring == "auto" and job.parallel.ulysses is None
    assert job.model.preset == "tiny-flux" and job.resources.time == "00:05:00"


@pytest.mark.parametrize(
    "text,overrides,needle",
    [
        ("model: {preset: tiny}\nworkload: {height: 64, width: 64}\nparalel: {ring: 2}\n", [], "'paralel'"),
        ("model: {preset: tiny, hiden: 3}\nworkload: {height: 64, width: 64}\n", [], "'model.hiden'"),
        ("model: {preset: tiny}\nworkload: {height: 64, width: 64}\n", ["workload.bacth=2"], "'workload.bacth'"),
        ("model: {preset: tiny}\nworkload: {height: 64, width: 64}\n", ["workload.batch=two"], "'workload.batch'"),
        ("model: {preset: tiny}\nworkload: {height: 64, width: 64}\n", ["parallel.ring=1.5"], "'parallel.ring'"),
        ("model: {preset: tiny}\nworkload: {height: 64, width: 64}\n", ["parallel.ring=many"], "parallel.ring"),
        ("model: {preset: tiny}\nworkload: {height: 64, width: 64}\n", ["parallel.ring"], "KEY=VALUE"),
        ("model: {preset: tiny}\nworkload: {height: 64, width: 64, kind: train}\n", [], "workload.kind"),
        ("model: {preset: tiny}\nworkload: {height: 64, width: 64, dtype: fp8}\n", [], "workload.dtype"),
        ("model: {preset: tiny}\nworkload: {height: 64, width: 64, seq_len: 9}\n", [], "workload.seq_len"),
        ("model: {preset: tiny}\nworkload: {frames: 9}\n", [], "needs height and width"),
        ("model: {preset: tiny}\nworkload: {height: 64, width: '${nope}'}\n", [], "interpolation"),
        ("model: {preset: tiny}\nworkload: {height: 64, width: 64}\nresources: {time: later}\n", [], "resources.time"),
        ("model: {preset: tiny\n", [], "YAML syntax error"),
        ("- a\n- b\n", [], "mapping"),
    ],
)
def test_bad_job_one_line(tmp_path, text, overrides, needle):
    p = write(tmp_path, "job.yaml", text)
    with pytest.raises(SporchError) as ei:
        load_job(p, overrides)
    msg = str(ei.value)
    assert needle in msg, msg
    assert "\n" not in msg.strip()


def test_all_examples_load():
    for p in sorted(EXAMPLES.glob("*.yaml")):
        job = load_job(p)
        resolve_model(job.model)
    tiny = load_job(EXAMPLES / "tiny.yaml")
    assert tiny.model.preset == "tiny" and tiny.workload.kind == "verify"


def test_shift_compile_and_weights_reach_the_plan(tmp_path):
    """Every plan field the runtime reads is settable from the job file."""
    from sporch.orchestrator.config.cluster import find_cluster
    from sporch.orchestrator.plan.planner import make_plan

    p = tmp_path / "j.yaml"
    p.write_text("model: {preset: tiny}\nworkload: {frames: 5, height: 64, width: 64}\n")
    plan = make_plan(find_cluster("local"), load_job(p, ["workload.shift=3", "model.weights=/w/tiny.safetensors"]))
    assert plan.workload.shift == 3.0 and plan.model.weights == "/w/tiny.safetensors"
    default = make_plan(find_cluster("local"), load_job(p))
    assert default.workload.shift is None and default.workload.compile is None  # None: on for CUDA only
    assert make_plan(find_cluster("local"), load_job(p, ["workload.compile=false"])).workload.compile is False
    with pytest.raises(SporchError, match="'workload.shift' must be > 0"):
        load_job(p, ["workload.shift=0"])
