"""Wan2.2 A14B generate (two experts) against diffusers' own ``WanPipeline`` with
``transformer``, ``transformer_2`` and ``boundary_ratio``.

A tiny random two-expert pipeline (the wan family's ``tiny_pipeline`` with a boundary) is saved in
the diffusers layout; sporch plans from the folder alone (model_index.json's boundary) and generates
unsharded, and on 4 gloo ranks U2R2 (the idle expert offloaded to host memory) and cfg 2 x U2
(parameters sharded over each sequence group, both experts resident). Frames are compared with
FRAME_TOL of test_generate.py: the same pipeline on the same inputs, float32, 4 steps. The switch
step (read from the pipeline's own calls) is compared with the one diffusers' rule gives on
diffusers' own timesteps. Image-to-video as Wan2.2 I2V A14B (first frame as latent condition, no
CLIP encoder) against ``WanImageToVideoPipeline`` likewise, unsharded and U2R2. A two-expert
generate stopped by USR2 before or at the switch step and requeued resumes exact.

The boundary 0.75 falls exactly on a timestep (UniPC, flow_shift 3, 4 steps: 999, 900, 750,
500): WanPipeline runs ``transformer`` at t == boundary (``t >= boundary``), so a ``>`` in
sporch would switch a step early and fail here.
"""

from __future__ import annotations

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

from .test_generate import FRAME_TOL  # noqa: E402

PROMPT = "a red fox running in snow"
NEGATIVE = "blurry low quality"
STEPS, SEED, BOUNDARY = 4, 11, 0.75
# 5 frames of 48 x 32: 2 latent frames of 6 x 4 (stride 4 x 8 x 8), 2 x 3 x 2 = 12 tokens (3 per rank on 4);
# the frame count and size are the cost here, not the point (the boundary depends on the 4 steps only)
FRAMES, HEIGHT, WIDTH = 5, 48, 32
WORKLOAD = dict(kind="generate", frames=FRAMES, height=HEIGHT, width=WIDTH, steps=STEPS, guidance_scale=5.0,
                guidance_scale_2=3.0, negative_prompt=NEGATIVE, dtype="float32", seed=SEED, prompt=PROMPT)


def _plan(model: dict, parallel: dict, pipeline: dict | None = None, workload: dict = WORKLOAD):
    job = {"name": "w22", "model": model, "workload": workload, "parallel": parallel,
           **({"pipeline": pipeline} if pipeline else {})}
    return make_plan(find_cluster("local"), job_from_dict(job))


def _tiny(root, seed: int, **config):
    from sporch.runtime.models.families.wan import TINY
    from sporch.runtime.pipelines.tiny import save_tiny_pipeline

    return save_tiny_pipeline("wan", root, seed=seed, config={**TINY, **config}, text_len=8, boundary_ratio=BOUNDARY)


@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    return _tiny(tmp_path_factory.mktemp("wan22") / "wan22", 3)


@pytest.fixture(scope="module")
def i2v(tmp_path_factory):
    """A tiny two-expert image-to-video folder (4 noise + 4 mask + 4 image latent channels in,
    4 out) and a first frame of another size than the video's (the pipelines resize it)."""
    from PIL import Image

    root = tmp_path_factory.mktemp("wan22-i2v")
    _tiny(root / "i2v", 5, in_channels=12, out_channels=4)
    pixels = (np.random.default_rng(0).random((40, 30, 3)) * 255).astype(np.uint8)
    Image.fromarray(pixels).save(root / "first.png")
    return {"folder": root / "i2v", "image": root / "first.png"}


def _i2v_reference(i2v):
    from diffusers import WanImageToVideoPipeline
    from PIL import Image

    pipe = WanImageToVideoPipeline.from_pretrained(i2v["folder"], dtype=torch.float32)
    return pipe(image=Image.open(i2v["image"]).convert("RGB"), prompt=PROMPT, negative_prompt=NEGATIVE, height=HEIGHT,
                width=WIDTH, num_frames=FRAMES, num_inference_steps=STEPS, guidance_scale=5.0, guidance_scale_2=3.0,
                max_sequence_length=8, output_type="np", generator=torch.Generator().manual_seed(SEED)).frames[0]


def _i2v_plan(i2v, parallel: dict):
    return _plan({"weights": str(i2v["folder"]), "text_len": 8}, parallel,
                 workload={**WORKLOAD, "image": str(i2v["image"])})


def test_image_to_video_equals_wan_image_to_video_pipeline(i2v, sharded_runs, tmp_path):
    """Unsharded and U2R2; another first frame moves the frames far beyond the tolerance."""
    from PIL import Image

    ref = _i2v_reference(i2v)
    plain = _run(_i2v_plan(i2v, {"ulysses": 4}).to_json(), str(tmp_path / "one"), unsharded=True)
    ranks = [r["i2v-U2R2"] for r in sharded_runs["ranks"]]  # on the world of test_sharded_equals_wan_pipeline
    sharded = [r for r in ranks if r["frames"]][0]
    for name, got in (("unsharded", plain), ("U2R2", sharded)):
        err = np.abs(got["frames"][0] - ref).max()
        print(f"i2v {name}: max |frames - WanImageToVideoPipeline| = {err:.3g}")
        assert err <= FRAME_TOL, (name, err)
        assert got["expert_switch_step"] == 3
    Image.fromarray(np.zeros((40, 30, 3), np.uint8)).save(tmp_path / "black.png")
    other = _run(_plan({"weights": str(i2v["folder"]), "text_len": 8}, {"ulysses": 4},
                       workload={**WORKLOAD, "image": str(tmp_path / "black.png")}).to_json(),
                 str(tmp_path / "black"), unsharded=True)
    assert ref.std() > 0.02 and np.abs(other["frames"][0] - ref).max() > 100 * FRAME_TOL


def _reference(folder: Path, **kw):
    """WanPipeline's frames and the index of the first step its transformer_2 ran (from its
    own timesteps after the run, by its rule)."""
    from diffusers import WanPipeline

    pipe = WanPipeline.from_pretrained(folder, dtype=torch.float32)
    args = dict(prompt=PROMPT, negative_prompt=NEGATIVE, height=HEIGHT, width=WIDTH, num_frames=FRAMES,
                num_inference_steps=STEPS, guidance_scale=5.0, guidance_scale_2=3.0, max_sequence_length=8,
                output_type="np", generator=torch.Generator().manual_seed(SEED))
    args.update(kw)
    frames = pipe(**args).frames[0]
    boundary = pipe.config.boundary_ratio * pipe.scheduler.config.num_train_timesteps
    switch = next(i for i, t in enumerate(pipe.scheduler.timesteps) if not t >= boundary)
    return frames, switch


@pytest.fixture(scope="module")
def reference(folder):
    return _reference(folder)


def _run(plan_json: str, out: str, unsharded: bool = False):
    from sporch.orchestrator.contract.plan import Plan
    from sporch.runtime.parallel import ParallelContext
    from sporch.runtime.pipelines.generate import run_generate

    plan = Plan.from_json(plan_json)
    ctx = None if unsharded else ParallelContext.from_plan(plan)
    frames = {}
    metrics = run_generate(plan, ctx, torch.device("cpu"), Path(out), frames_sink=lambda i, f: frames.__setitem__(i, f))
    return {**metrics, "frames": frames}


def _cases(folder):
    model = {"weights": str(folder), "text_len": 8}
    return {
        "U2R2-offload": _plan(model, {"ulysses": 2, "ring": 2, "cfg": 1, "shard_weights": "none"},
                              {"experts": "offload"}),
        "cfg2-U2-sequence": _plan(model, {"ulysses": 2, "ring": 1, "cfg": 2, "shard_weights": "sequence"},
                                  {"experts": "resident"}),
    }


def _unsharded_plan(folder):
    return _plan({"weights": str(folder), "text_len": 8}, {"ulysses": 4, "ring": 1, "cfg": 1})


@pytest.fixture(scope="module")
def unsharded(folder, tmp_path_factory):
    """The two-expert generate in one process (no ParallelContext), uninterrupted: compared with
    WanPipeline, and the run the requeued ones must equal."""
    return _run(_unsharded_plan(folder).to_json(), str(tmp_path_factory.mktemp("wan22-unsharded")), unsharded=True)


def test_unsharded_equals_wan_pipeline_and_switches_at_its_step(folder, reference, unsharded):
    ref, switch = reference
    plan = _unsharded_plan(folder)
    assert plan.model.boundary_ratio == BOUNDARY and plan.placement.experts == "resident"
    got = unsharded  # one process, no ParallelContext
    err = np.abs(got["frames"][0] - ref).max()
    print(f"unsharded: max |frames - WanPipeline| = {err:.3g}; switch step {got['expert_switch_step']} (diffusers "
          f"{switch})")
    assert ref.std() > 0.02 and err <= FRAME_TOL
    assert switch == 3  # t = 750 == boundary still runs transformer
    assert got["expert_switch_step"] == switch and got["experts"]["switch_steps"] == [switch]
    assert got["experts"]["boundary_timestep"] == 750.0 and got["experts"]["count"] == 2
    assert got["experts"]["boundary_ratio"] == BOUNDARY


def _run_cases(cases):
    """Several generate runs on the same ranks, one after another: {name: _run's result}."""
    return {name: _run(plan_json, out) for name, plan_json, out in cases}


def run_world(plans: dict, root: Path) -> dict:
    """Every plan of ``plans`` ({name: Plan}) generated on one world of 4 ranks, one after another,
    each into ``root / name``: {"plans": plans, "ranks": each rank's {name: _run's result}}."""
    for name in plans:
        (root / name).mkdir()
    ranks = run_distributed(_run_cases, 4, [(n, p.to_json(), str(root / n)) for n, p in plans.items()], timeout=600)
    return {"plans": plans, "ranks": ranks}


@pytest.fixture(scope="module")
def sharded_runs(folder, i2v, tmp_path_factory):
    """One 4-rank world for every sharded run of the module: the two text-to-video layouts and
    the image-to-video U2R2 (test_image_to_video_equals_wan_image_to_video_pipeline)."""
    plans = {**_cases(folder), "i2v-U2R2": _i2v_plan(i2v, {"ulysses": 2, "ring": 2})}
    return run_world(plans, tmp_path_factory.mktemp("wan22-sharded"))


def test_sharded_equals_wan_pipeline(folder, reference, sharded_runs):
    ref, switch = reference
    cases = _cases(folder)
    for name, plan in cases.items():
        ranks = [r[name] for r in sharded_runs["ranks"]]
        writers = [r for r in ranks if r["frames"]]
        assert len(writers) == 1, name
        err = np.abs(writers[0]["frames"][0] - ref).max()
        print(f"{name}: max |frames - WanPipeline| = {err:.3g}")
        assert err <= FRAME_TOL, (name, err)
        for r in ranks:
            assert r["expert_switch_step"] == switch, name
            x = r["experts"]
            assert x["placement"] == plan.placement.experts
            # offloaded: the experts traded places once (a single prompt)
            assert x["moves"] == (1 if x["placement"] == "offload" else 0), (name, x)
    assert cases["cfg2-U2-sequence"].placement.shard_weights == "sequence"


def test_comparison_can_fail(folder, reference):
    """One expert all the way, or the low-noise scale ignored, moves the frames far beyond the
    tolerance: the second expert and guidance_scale_2 are both seen by the comparison."""
    ref, _ = reference
    same_scale, _ = _reference(folder, guidance_scale_2=5.0)
    assert np.abs(same_scale - ref).max() > 100 * FRAME_TOL
    from diffusers import WanPipeline

    pipe = WanPipeline.from_pretrained(folder, dtype=torch.float32)
    pipe.register_to_config(boundary_ratio=None)
    one = pipe(prompt=PROMPT, negative_prompt=NEGATIVE, height=HEIGHT, width=WIDTH, num_frames=FRAMES,
               num_inference_steps=STEPS, guidance_scale=5.0, max_sequence_length=8, output_type="np",
               generator=torch.Generator().manual_seed(SEED)).frames[0]
    assert np.abs(one - ref).max() > 100 * FRAME_TOL


def test_a_step_cache_restarts_at_the_expert_switch(folder, tmp_path):
    """workload.cache with two experts: the low-noise expert gets a fresh cache, so its first
    step is computed even where the policy would skip everything (threshold 1e9)."""
    cache = {"method": "fbcache", "threshold": 1e9, "warmup_steps": 1, "max_consecutive": 0}
    plan = _plan({"weights": str(folder), "text_len": 8}, {"ulysses": 4, "ring": 1, "cfg": 1},
                 workload={**WORKLOAD, "steps": 8, "cache": cache})  # run in one process (unsharded)
    got = _run(plan.to_json(), str(tmp_path), unsharded=True)
    switch, rec = got["expert_switch_step"], got["step_cache"]["batches"][0]
    assert 1 < switch < 7, switch
    assert rec["computed"] == [0, switch, 7] and rec["skipped"] == [s for s in range(1, 7) if s != switch]


class _StopAfter:
    """The launcher's Progress as the generate sees it: USR2 arrives during step ``k`` (read once
    per finished step, at the replica's agreement)."""

    def __init__(self, k: int) -> None:
        self.k, self.reads = k, 0

    @property
    def stop_requested(self) -> bool:
        self.reads += 1
        return self.reads >= self.k


@pytest.mark.parametrize("stop_after", [2, 3])  # the stop before the switch step (3) and at it
def test_a_requeued_two_expert_generate_resumes_exact(folder, unsharded, tmp_path, stop_after):
    """Stopped by USR2 after step k, the job requeued into the same folder resumes from step k:
    the expert that runs each remaining step is the one the uninterrupted run used (the switch
    at step 3 whether the stop came before it or at it) and the frames are the uninterrupted
    run's (float32, one process)."""
    from sporch.runtime.pipelines.generate import run_generate
    from sporch.runtime.progress import RequeueRequested

    plan = _unsharded_plan(folder)
    ref = unsharded  # the uninterrupted run (one per module, shared with the WanPipeline comparison)
    out = tmp_path / "run"
    with pytest.raises(RequeueRequested, match=f"after step {stop_after}/{STEPS}"):
        run_generate(plan, None, torch.device("cpu"), out, frames_sink=lambda i, f: None,
                     progress=_StopAfter(stop_after))
    got = _run(plan.to_json(), str(out), unsharded=True)
    err = float(np.abs(got["frames"][0] - ref["frames"][0]).max())
    print(f"stopped after {stop_after}/{STEPS}, resumed: max |frames - uninterrupted| = {err:.3g}; switch step "
          f"{got['expert_switch_step']}")
    assert got["resumed"] == {"0": stop_after}, got["resumed"]
    assert got["expert_switch_step"] == ref["expert_switch_step"] == 3
    assert err <= 1e-6, err
