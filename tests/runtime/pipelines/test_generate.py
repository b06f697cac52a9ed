"""`workload.kind: generate` against diffusers' own pipelines.

Tiny random Wan2.1 and Flux.1 pipelines are built with diffusers + transformers (the families'
``tiny_pipeline``: tiny configs, a word-level tokenizer from the tokenizers library,
``save_pretrained`` into a temporary folder). sporch's generate (the same pipelines around the
sequence-parallel transformer) runs from that folder on 4 gloo ranks (Wan: U2R2 and cfg 2 x U2;
Flux: U2R2) and the decoded frames are compared with ``WanPipeline`` / ``FluxPipeline`` loaded
from the same folder, same prompts and seeds, float32. The files written are read back with
imageio.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

pytest.importorskip("diffusers")
pytest.importorskip("imageio_ffmpeg")

from sporch.orchestrator.config.cluster import find_cluster  # noqa: E402
from sporch.orchestrator.config.job import job_from_dict  # noqa: E402
from sporch.orchestrator.plan.planner import make_plan  # noqa: E402
from sporch.runtime.testing import run_distributed  # noqa: E402

REPO = Path(__file__).resolve().parents[3]

# Tolerance on decoded frames (values in [0, 1]), float32. The sharded transformer matches the
# unsharded class within 1e-5 relative (tests/runtime/models/test_generic.py); everything else (text
# encoders, scheduler steps, VAE, post-processing) is diffusers' own code on the same inputs, and the
# noise is drawn by the pipeline from the same generator. What remains is float32 rounding in a
# different order (sharded attention, the CFG calls split over the cfg group), carried through 3
# scheduler steps and the VAE. 1e-4 is 1/40 of one 8-bit level, far below any visible change, while
# a wrong seed, prompt, shift or latent scaling moves frames by 1e-2 or more (checked below, so the
# comparison can fail).
FRAME_TOL = 1e-4

WAN_PROMPTS = ["a red fox running in snow", "a small boat on the sea at sunset"]
NEGATIVE = "blurry low quality"
FLUX_PROMPTS = ["a white cat sitting under a tree"]
STEPS = 3
SEED = 11

# 5 frames of 48 x 32: 2 latent frames of 6 x 4 (stride 4 x 8 x 8), 2 x 3 x 2 = 12 tokens (3 per rank on U2R2)
WAN_FRAMES, WAN_HEIGHT, WAN_WIDTH = 5, 48, 32
WAN_WORKLOAD = dict(kind="generate", frames=WAN_FRAMES, height=WAN_HEIGHT, width=WAN_WIDTH, steps=STEPS,
                    guidance_scale=5.0, negative_prompt=NEGATIVE, dtype="float32", seed=SEED)
WAN_VIDEO = (WAN_FRAMES, WAN_HEIGHT, WAN_WIDTH, 3)
# head_dim 128 keeps Flux.1's RoPE split (16, 56, 56); 2 heads of it for ulysses 2
FLUX_MODEL = dict(preset="flux.1-dev", depth=1, single_depth=1, hidden=256, num_heads=2, head_dim=128, ffn_dim=1024,
                  in_channels=4, vae_stride=[1, 2, 2], text_len=8, text_dim=32)
FLUX_WORKLOAD = dict(kind="generate", height=24, width=20, steps=STEPS, guidance_scale=3.5, dtype="float32",
                     seed=SEED)  # 1 x 6 x 5 = 30 tokens


def _plan(model: dict, workload: dict, parallel: dict, name: str, pipeline: dict | None = None):
    job = job_from_dict({"name": name, "model": model, "workload": workload, "parallel": parallel,
                         **({"pipeline": pipeline} if pipeline else {})})
    return make_plan(find_cluster("local"), job)


@pytest.fixture(scope="module")
def folders(tmp_path_factory):
    """The two tiny pipelines, saved in the diffusers layout, and the prompt file."""
    from sporch.runtime.pipelines.tiny import save_tiny_pipeline

    root = tmp_path_factory.mktemp("pipelines")
    wan_model = _plan({"preset": "tiny"}, {**WAN_WORKLOAD, "prompt": "x"}, {}, "probe").model
    flux_model = _plan(FLUX_MODEL, {**FLUX_WORKLOAD, "prompt": "x"}, {"ulysses": 2, "ring": 2}, "probe").model
    for family, model, seed in (("wan", wan_model, 1), ("flux", flux_model, 2)):
        save_tiny_pipeline(family, root / family, seed=seed, config=model.diffusers_config, text_len=model.text_len,
                          vae_stride=tuple(model.vae_stride))
    prompts = root / "prompts.txt"
    prompts.write_text("# two prompts\n" + "\n".join(WAN_PROMPTS) + "\n\n", encoding="utf-8")
    return {"wan": root / "wan", "flux": root / "flux", "prompts": prompts, "root": root}


def _reference_wan(folder: Path, seed_offset: int = 0, prompts: int = len(WAN_PROMPTS), **kw) -> np.ndarray:
    """WanPipeline's frames of the first ``prompts`` of WAN_PROMPTS."""
    from diffusers import WanPipeline

    pipe = WanPipeline.from_pretrained(folder, dtype=torch.float32)
    out = []
    for i, prompt in enumerate(WAN_PROMPTS[:prompts]):
        args = dict(prompt=prompt, negative_prompt=NEGATIVE, height=WAN_HEIGHT, width=WAN_WIDTH, num_frames=WAN_FRAMES,
                    num_inference_steps=STEPS, guidance_scale=5.0, max_sequence_length=8, output_type="np",
                    generator=torch.Generator().manual_seed(SEED + i + seed_offset))
        args.update(kw)
        out.append(pipe(**args).frames[0])
    return np.stack(out)  # [2, F, H, W, 3]


def _reference_flux(folder: Path, seed_offset: int = 0) -> np.ndarray:
    from diffusers import FluxPipeline

    pipe = FluxPipeline.from_pretrained(folder, dtype=torch.float32)
    img = pipe(prompt=FLUX_PROMPTS[0], height=24, width=20, num_inference_steps=STEPS, guidance_scale=3.5,
               max_sequence_length=8, output_type="np",
               generator=torch.Generator().manual_seed(SEED + seed_offset)).images
    return img[:, None]  # [1, 1, H, W, 3]


def _generate_world(cases):
    """Each case on the same 4 gloo ranks: sporch's generate workload from a Plan."""
    from sporch.orchestrator.contract.plan import Plan
    from sporch.runtime.parallel import ParallelContext
    from sporch.runtime.pipelines.generate import run_generate

    out = {}
    for name, plan_json, folder in cases:
        plan = Plan.from_json(plan_json)
        ctx = ParallelContext.from_plan(plan)
        frames = {}
        metrics = run_generate(plan, ctx, torch.device("cpu"), Path(folder),
                               frames_sink=lambda i, f: frames.__setitem__(i, f))
        out[name] = {**metrics, "frames": frames, "cfg_rank": ctx.cfg_rank, "sequence_rank": ctx.sequence_rank}
    return out


@pytest.fixture(scope="module")
def generated(folders):
    wan = {"preset": "tiny", "weights": str(folders["wan"])}
    flux = {**FLUX_MODEL, "weights": str(folders["flux"])}
    wl = {**WAN_WORKLOAD, "prompt_file": str(folders["prompts"])}
    cases = [
        ("wan-U2R2", _plan(wan, wl, {"ulysses": 2, "ring": 2, "cfg": 1}, "wan-u2r2")),
        # these two with the DiT's parameters sharded (FSDP2): the frames must not change (Wan's two CFG calls run
        # one per cfg rank, so its parameters are sharded over each sequence group, not the world)
        ("wan-cfg2-U2", _plan(wan, wl, {"ulysses": 2, "ring": 1, "cfg": 2, "shard_weights": "sequence"}, "wan-cfg2")),
        ("flux-U2R2", _plan(flux, {**FLUX_WORKLOAD, "prompt": FLUX_PROMPTS[0]},
                            {"ulysses": 2, "ring": 2, "shard_weights": "sequence"}, "flux-u2r2")),
        # the text encoders and the VAE off the leader's GPU (pipeline.*): the frames must not change
        ("wan-U2R2-placed", _plan(wan, wl, {"ulysses": 2, "ring": 2, "cfg": 1}, "wan-placed",
                                  {"text_encoder": "sharded", "vae": "parallel"})),
        ("flux-U2R2-placed", _plan(flux, {**FLUX_WORKLOAD, "prompt": FLUX_PROMPTS[0]}, {"ulysses": 2, "ring": 2},
                                   "flux-placed", {"text_encoder": "cpu", "vae": "parallel"})),
    ]
    dirs = {name: folders["root"] / "out" / name for name, _ in cases}
    for d in dirs.values():
        d.mkdir(parents=True)
    results = run_distributed(_generate_world, 4, [(n, p.to_json(), str(dirs[n])) for n, p in cases],
                              timeout=900)
    return {"plans": dict(cases), "ranks": results, "dirs": dirs}


def _sporch_frames(generated, name: str) -> np.ndarray:
    """The decoded frames of every prompt, from the ranks that decoded them (one per replica)."""
    frames = {}
    for rank in generated["ranks"]:
        frames.update(rank[name]["frames"])
    return np.stack([frames[i] for i in sorted(frames)])


@pytest.fixture(scope="module")
def wan_reference(folders):
    return _reference_wan(folders["wan"])


@pytest.mark.parametrize("name", ["wan-U2R2", "wan-cfg2-U2", "wan-U2R2-placed"])
def test_wan_frames_equal_wan_pipeline(generated, wan_reference, name):
    expected = "sequence" if name == "wan-cfg2-U2" else "none"
    p = generated["plans"][name].placement
    assert p.shard_weights == expected
    assert (p.text_encoder, p.vae) == (("sharded", "parallel") if name.endswith("placed") else ("leader", "leader"))
    ours = _sporch_frames(generated, name)
    assert ours.shape == wan_reference.shape == (2, *WAN_VIDEO)
    assert wan_reference.std() > 0.02  # not a flat image: the comparison means something
    err = np.abs(ours - wan_reference).max()
    print(f"{name}: max |frames - WanPipeline| = {err:.3g}")
    assert err <= FRAME_TOL, (name, err)


def test_wan_comparison_can_fail(folders, wan_reference):
    """Another seed, or no negative prompt, moves the frames far beyond the tolerance (the first
    prompt's alone: more than the max over both prompts asks)."""
    other_seed = _reference_wan(folders["wan"], seed_offset=5, prompts=1)
    no_negative = _reference_wan(folders["wan"], negative_prompt=None, prompts=1)
    assert np.abs(other_seed - wan_reference[:1]).max() > 100 * FRAME_TOL
    assert np.abs(no_negative - wan_reference[:1]).max() > 100 * FRAME_TOL


def test_flux_frames_equal_flux_pipeline(generated, folders):
    assert generated["plans"]["flux-U2R2"].placement.shard_weights == "sequence"
    p = generated["plans"]["flux-U2R2-placed"].placement
    assert (p.text_encoder, p.vae, p.pipeline_degree) == ("cpu", "parallel", 4)
    ref = _reference_flux(folders["flux"])
    other = _reference_flux(folders["flux"], seed_offset=1)
    assert ref.std() > 0.02 and np.abs(other - ref).max() > 100 * FRAME_TOL
    for name in ("flux-U2R2", "flux-U2R2-placed"):
        ours = _sporch_frames(generated, name)
        assert ours.shape == ref.shape == (1, 1, 24, 20, 3)
        err = np.abs(ours - ref).max()
        print(f"{name}: max |frames - FluxPipeline| = {err:.3g}")
        assert err <= FRAME_TOL, (name, err)


def test_files_open_with_frames_size_prompt_and_seed(generated):
    """One file per prompt, written by one rank per dp replica; read back with imageio."""
    from sporch.runtime.pipelines.media import read, to_uint8

    for name, prompts, fmt, shape in (("wan-U2R2", WAN_PROMPTS, "mp4", WAN_VIDEO),
                                      ("wan-cfg2-U2", WAN_PROMPTS, "mp4", WAN_VIDEO),
                                      ("flux-U2R2", FLUX_PROMPTS, "png", (1, 24, 20, 3)),
                                      ("wan-U2R2-placed", WAN_PROMPTS, "mp4", WAN_VIDEO),
                                      ("flux-U2R2-placed", FLUX_PROMPTS, "png", (1, 24, 20, 3))):
        writers = [r[name] for r in generated["ranks"] if r[name].get("outputs")]
        assert [(w["cfg_rank"], w["sequence_rank"]) for w in writers] == [(0, 0)], name
        outputs = writers[0]["outputs"]
        assert [o["prompt"] for o in outputs] == prompts
        assert [o["seed"] for o in outputs] == [SEED + i for i in range(len(prompts))]
        files = sorted(p.name for p in generated["dirs"][name].iterdir() if p.name not in ("latents", "checkpoint"))
        # the per-step resume files are dropped once a prompt is written
        assert not list((generated["dirs"][name] / "checkpoint").glob("generate_rank*.pt"))
        # the denoised latents were kept, one file per prompt, before decoding
        assert len(list((generated["dirs"][name] / "latents").glob("*.safetensors"))) == len(prompts)
        assert files == sorted(o["file"] for o in outputs) and all(f.endswith("." + fmt) for f in files)
        for o in outputs:
            back = read(Path(o["path"]))
            assert back.shape == shape, (name, back.shape)
            decoded = to_uint8(writers[0]["frames"][o["index"]])
            diff = np.abs(back.astype(float) - decoded.astype(float)).mean()
            # PNG is lossless; H.264 at quality 8 stays within a few levels on average
            assert diff == 0 if fmt == "png" else diff < 12, (name, diff)
        for r in generated["ranks"]:
            assert r[name]["peak_memory_bytes"] > 0


def test_stage_figures(generated):
    """result.json's per-stage seconds and peak memory: load and denoise (per step) on every rank;
    text encode, decode and save on the leader (a sharded encoder: every rank of the group encodes;
    a parallel decode: every rank of the group decodes); the others encode and decode nothing."""
    for name in generated["plans"]:
        for rank, r in enumerate(generated["ranks"]):
            st = r[name]["stages"]
            decodes = rank == 0 or name.endswith("placed")  # a parallel decode runs on the sequence group
            encodes = rank == 0 or name == "wan-U2R2-placed"  # a sharded encoder: the sequence group
            want = ({"load", "denoise"} | ({"encode"} if encodes else set()) | ({"decode"} if decodes else set())
                    | ({"save"} if rank == 0 else set()))
            assert set(st) == want, (name, rank, st)
            prompts = len(FLUX_PROMPTS) if name.startswith("flux") else len(WAN_PROMPTS)  # one pipeline call each
            assert st["denoise"]["steps"] == len(r[name]["step_ms"]) == STEPS * prompts
            assert all(v["s"] >= 0 and v["peak_memory_bytes"] > 0 for v in st.values())
            assert st["denoise"]["s_per_step"] == pytest.approx(st["denoise"]["s"] / st["denoise"]["steps"], rel=1e-3)


def _generate_once(plan_json: str, folder: str):
    from sporch.orchestrator.contract.plan import Plan
    from sporch.runtime.parallel import ParallelContext
    from sporch.runtime.pipelines.generate import run_generate

    plan = Plan.from_json(plan_json)
    frames = {}
    metrics = run_generate(plan, ParallelContext.from_plan(plan), torch.device("cpu"), Path(folder),
                           frames_sink=lambda i, f: frames.__setitem__(i, f))
    return {**metrics, "frames": frames}


def test_a_failed_decode_loses_no_denoising(folders, generated, tmp_path):
    """The first prompt's decode fails after all its denoising steps ran (a VAE config whose latent
    statistics do not fit its latents stands in for the VAE running out of memory: the pipeline's
    decode tail raises, after the step callback kept the latents); `sporch decode` and the re-run of
    the same job decode the kept latents without a single denoising step of that prompt, and the
    frames are those of an uninterrupted run, bit for bit."""
    import shutil

    from sporch.runtime.testing import RankError

    root = tmp_path / "wan"
    shutil.copytree(folders["wan"], root)
    vae = root / "vae" / "config.json"
    good = vae.read_text()
    config = json.loads(good)
    vae.write_text(json.dumps({**config, "latents_std": config["latents_std"] + [1.0]}))  # one too many: decode fails
    wl = {**WAN_WORKLOAD, "prompt_file": str(folders["prompts"])}
    plan = _plan({"preset": "tiny", "weights": str(root)}, wl, {"ulysses": 2, "ring": 2, "cfg": 1}, "wan-u2r2")
    out = tmp_path / "run"
    out.mkdir()
    with pytest.raises(RankError):
        run_distributed(_generate_once, 4, plan.to_json(), str(out), timeout=600)
    kept = sorted(p.name for p in (out / "latents").glob("*.safetensors"))
    assert kept == ["00000.safetensors"]  # the first prompt denoised, its decode failed: the job stopped there
    assert not list(out.glob("*.mp4"))  # nothing decoded

    vae.write_text(good)  # the VAE fixed (or more memory)
    # `sporch decode RUN_DIR` on a copy of the job folder: the VAE only, one process
    copy = tmp_path / "copy"
    shutil.copytree(out, copy)
    (copy / "plan.json").write_text(plan.to_json())
    p = subprocess.run([sys.executable, "-m", "sporch.orchestrator.cli.main", "decode", str(copy), "--device", "cpu"],
                       capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stdout + p.stderr
    assert f"decoded 1 prompt(s) into {copy}" in p.stdout and len(list(copy.glob("*.mp4"))) == 1
    # and the same job run again: the kept prompt decoded, the other denoised (its steps only)
    again = run_distributed(_generate_once, 4, plan.to_json(), str(out), timeout=600)
    for r in again:
        assert len(r["step_ms"]) == STEPS and r["denoised_prompts"] == 1 and r["reused_latents"] == [0]
    frames = again[0]["frames"]
    before = {}
    for rank in generated["ranks"]:
        before.update(rank["wan-U2R2"]["frames"])
    assert sorted(frames) == [0, 1]
    for i in (0, 1):
        assert np.array_equal(frames[i], before[i]), i
    assert len(list(out.glob("*.mp4"))) == 2


def test_decode_refuses_what_it_cannot_decode_in_one_line(tmp_path, capsys):
    from sporch.orchestrator.cli.main import main
    from sporch.runtime.testing import plan_for, preset_model
    from sporch.orchestrator.contract.plan import Layout

    def decode(folder):
        # the command's entry point in this process (`sporch decode` as a process: test_a_failed_decode_loses_no_denoising)
        rc = main(["decode", str(folder)])
        err = capsys.readouterr().err
        assert rc == 2 and err.count("\n") == 1 and "Traceback" not in err, err
        return err

    assert "has no plan.json" in decode(tmp_path)
    (tmp_path / "plan.json").write_text(plan_for(Layout(ulysses=1), preset_model("tiny")).to_json())
    assert "is a verify job; only generate jobs keep latents" in decode(tmp_path)
    gen = _plan({"preset": "tiny"}, {**WAN_WORKLOAD, "prompt": "x"}, {}, "gen")
    (tmp_path / "plan.json").write_text(gen.to_json())
    assert "holds no latents: the job never finished denoising a prompt" in decode(tmp_path)


def test_text_encoded_once_per_replica(generated):
    """Only the replica's leader holds the text encoder and the VAE, unless they are placed
    elsewhere: a sharded encoder and a parallel decode run on the whole sequence group."""
    for name in generated["plans"]:
        roles = [r[name]["roles"] for r in generated["ranks"]]
        want = {"wan-U2R2-placed": [["text_encoder", "vae"]] * 4,
                "flux-U2R2-placed": [["text_encoder", "vae"], ["vae"], ["vae"], ["vae"]]}.get(
            name, [["text_encoder", "vae"], [], [], []])
        assert roles == want, (name, roles)


def test_plan_places_encoder_and_vae(generated):
    for name, plan in generated["plans"].items():
        if name.endswith("placed"):
            continue
        pipe = plan.estimates.pipeline
        assert pipe.text_encoder.ranks == (0,) and pipe.vae.ranks == (0,)
        assert pipe.transformer.ranks == (0, 1, 2, 3)
    dp2 = _plan({"preset": "wan2.1-t2v-1.3b"}, {**WAN_WORKLOAD, "prompt": "x", "batch": 2, "height": 480,
                                                 "width": 832, "frames": 81},
                {"dp": 2, "ulysses": 2, "ring": 1, "cfg": 1}, "dp2")
    e = dp2.estimates
    assert e.pipeline.text_encoder.ranks == (0, 2)
    assert e.pipeline.text_encoder.bytes == 5_680_000_000 * 4  # float32: the workload's dtype
    assert e.memory.memory_bytes_per_gpu == max(e.memory.dit_memory_bytes_per_gpu, e.pipeline.leader_memory_bytes)
    assert e.memory.memory_bytes_per_gpu > e.memory.dit_memory_bytes_per_gpu


# -- the example and the CLI ---------------------------------------------------------------

def test_example_writes_a_video(tmp_path):
    """examples/tiny-generate.yaml's point (planned for the local cluster, as `sporch run --local
    --cluster local` plans it) run by the launcher's own run_point on the pool's 4 ranks: it creates
    its tiny random pipeline and lists the MP4 in result.json. (The `sporch run --local` command and
    its launch are run for real by tests/runtime/launch/test_local_run.py; a generate job's real
    LocalRun launches, and their step progress in the rank's log, by
    tests/runtime/launch/test_generate_requeue.py.)"""
    from sporch.orchestrator.contract.exit_codes import EXIT_OK
    from sporch.runtime.pipelines.media import read
    from tests.runtime.launch.on_ranks import plan_file, result, run_point_on_ranks

    weights = tmp_path / "tiny-wan"
    run_dir = tmp_path / "run"
    plan_path = plan_file(run_dir, f"model.weights={weights}", job=REPO / "examples" / "tiny-generate.yaml")
    assert run_point_on_ranks(plan_path, run_dir) == [EXIT_OK] * 4
    res = result(run_dir)
    (out,) = res["outputs"]
    assert out["prompt"].startswith("a red fox") and out["seed"] == 0
    assert read(Path(out["path"])).shape == (out["frames"], out["height"], out["width"], 3)
    assert set(res["peak_memory_bytes_by_rank"]) == {"0", "1", "2", "3"}
    assert (weights / "model_index.json").is_file()
    # what `sporch run --local` prints at the end of this run: the video, its seed and its prompt
    import io

    from rich.console import Console

    from sporch.orchestrator.cli.run_cmd import _print_summary
    from sporch.orchestrator.contract.plan import Plan
    from sporch.orchestrator.contract.results import JobResult
    from sporch.orchestrator.submit.local_run import LocalRunResult

    con = Console(file=io.StringIO(), width=400)
    ran = LocalRunResult(run_dir, {rank: 0 for rank in range(4)}, JobResult.load(run_dir / "result.json"))
    _print_summary(ran, Plan.from_json(plan_path.read_text()), con)
    printed = con.file.getvalue()
    assert f"{out['path']} (seed 0: {out['prompt']})" in printed and "completed" in printed, printed


def test_missing_extra_is_one_line(monkeypatch, tmp_path, capsys):
    """`sporch run --local` of a generate job without the extra: exit 2, one line naming it,
    no run folder (the extra's absence is emulated by one more module that does not exist)."""
    from sporch.orchestrator.cli.main import main
    from sporch.orchestrator.models import generate_inputs as check

    monkeypatch.setattr(check, "PIPELINE_MODULES", check.PIPELINE_MODULES + ("sporch_no_such_module",))
    rc = main(["run", "--local", "--cluster", "local", str(REPO / "examples/tiny-generate.yaml"),
               "--run-dir", str(tmp_path / "run"), f"model.weights={tmp_path / 'w'}"])
    err = capsys.readouterr().err
    assert rc == 2
    lines = [ln for ln in err.splitlines() if ln.strip()]
    assert len(lines) == 1 and "pip install sporch[pipelines]" in lines[0], err
    assert not (tmp_path / "run").exists()
    with pytest.raises(check.PipelinesMissing, match=r"pip install sporch\[pipelines\]"):
        check.require_pipelines()
