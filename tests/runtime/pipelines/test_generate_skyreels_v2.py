"""`workload.kind: generate` for SkyReels-V2 (split plan derived) against diffusers' ``SkyReelsV2Pipeline``.

A tiny random SkyReels-V2 text-to-video folder in the publisher's layout (the family's ``tiny_pipeline``:
SkyReelsV2Transformer3DModel, a tiny umT5, AutoencoderKLWan, UniPC with flow sigmas; seeded weights, the
word-level tokenizer; nothing downloaded) is generated from with sporch's generate workload on 4 gloo
ranks, float32: U2R2, and cfg 2 x U2 (each cfg rank computes one of the pipeline's two calls per step,
"cond" / "uncond": ``PipelineCfg.TWO_CALLS``), both in one spawned world. The leader's frames are
compared with ``SkyReelsV2Pipeline`` loaded from the same folder and run unsharded (same prompt,
negative prompt, seed, steps, guidance) within test_generate.py's FRAME_TOL; guidance off moves the
frames far beyond it, so the comparison can fail. The image-to-video and DF 1.3B presets are refused
at plan time in one line.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch

pytest.importorskip("diffusers")

from sporch.orchestrator.config.cluster import find_cluster  # noqa: E402
from sporch.orchestrator.config.job import job_from_dict  # noqa: E402
from sporch.orchestrator.plan.planner import make_plan  # noqa: E402
from tests.runtime.pipelines.four_rank_generate import plan_for, run_four_ranks  # noqa: E402
from tests.runtime.pipelines.test_generate import FRAME_TOL  # noqa: E402

PROMPT = "a red fox running in snow"
NEGATIVE = "blurry low quality"
SEED, STEPS, GUIDANCE = 7, 3, 6.0
FRAMES, HEIGHT, WIDTH = 9, 80, 48  # latents 3 x 10 x 6: 3 x 5 x 3 = 45 tokens
WORKLOAD = dict(kind="generate", prompt=PROMPT, negative_prompt=NEGATIVE, frames=FRAMES, height=HEIGHT, width=WIDTH,
                steps=STEPS, guidance_scale=GUIDANCE, dtype="float32", seed=SEED)
CASES = {"U2R2": {"ulysses": 2, "ring": 2}, "cfg2xU2": {"cfg": 2, "ulysses": 2, "ring": 1}}


def _plan(folder: Path, parallel: dict):
    return plan_for(folder, WORKLOAD, parallel)


@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    from sporch.runtime.pipelines.tiny import save_tiny_pipeline

    root = tmp_path_factory.mktemp("skyreels-v2")
    return save_tiny_pipeline("skyreels-v2", root / "pipe", seed=3)


@pytest.fixture(scope="module")
def pipe(folder):
    from diffusers import SkyReelsV2Pipeline

    p = SkyReelsV2Pipeline.from_pretrained(folder, dtype=torch.float32)
    p.set_progress_bar_config(disable=True)
    return p


def _reference(pipe, guidance: float = GUIDANCE) -> np.ndarray:
    """[F, H, W, 3]: SkyReelsV2Pipeline on the folder, as a user would call it (its default text length)."""
    out = pipe(prompt=PROMPT, negative_prompt=NEGATIVE, num_frames=FRAMES, height=HEIGHT, width=WIDTH,
               num_inference_steps=STEPS, guidance_scale=guidance, output_type="np",
               generator=torch.Generator().manual_seed(SEED))
    return np.asarray(out.frames)[0]


@pytest.fixture(scope="module")
def reference(pipe):
    return _reference(pipe)


@pytest.fixture(scope="module")
def four_ranks(folder, tmp_path_factory):
    return run_four_ranks(folder, WORKLOAD, CASES, tmp_path_factory.mktemp("skyreels-v2-out"), "blocks")


def test_the_plan_runs_skyreels_v2_pipeline_with_a_derived_split(folder):
    plan = _plan(folder, CASES["U2R2"])
    assert plan.model.family == "skyreels-v2" and plan.model.diffusers_class == "SkyReelsV2Transformer3DModel"
    assert plan.model.vae_stride == [4, 8, 8]


def test_u2r2_frames_equal_the_diffusers_pipeline(four_ranks, reference):
    """U2R2: the leader's frames equal SkyReelsV2Pipeline's unsharded; the other ranks encode, decode
    and write nothing; every rank ran every step, both CFG calls per step."""
    assert reference.shape == (FRAMES, HEIGHT, WIDTH, 3) and reference.std() > 0.02  # not flat
    leader = four_ranks[0]["U2R2"]
    err = float(np.abs(leader["frames"][0] - reference).max())
    print(f"skyreels-v2 U2R2: max |frames - {leader['pipeline']}| = {err:.3g}")
    assert leader["pipeline"] == "SkyReelsV2Pipeline"
    assert err <= FRAME_TOL, err
    assert len(leader["outputs"]) == 1 and leader["roles"] == ["text_encoder", "vae"]
    for rank in four_ranks:
        assert rank["U2R2"]["passes"] == 2 * STEPS and rank["U2R2"]["rows"] == [1] * (2 * STEPS)
    for rank in four_ranks[1:]:
        r = rank["U2R2"]
        assert r["frames"] == {} and r["outputs"] == [] and r["roles"] == [] and len(r["step_ms"]) == STEPS


def test_cfg2_frames_equal_the_diffusers_pipeline_and_guidance_matters(four_ranks, reference, pipe):
    """cfg 2 x U2: the leader's frames equal the pipeline's; each rank's blocks ran once per step (its
    cfg rank's one of the two calls); guidance off moves the frames far beyond the tolerance."""
    leader = four_ranks[0]["cfg2xU2"]
    err = float(np.abs(leader["frames"][0] - reference).max())
    no_cfg = float(np.abs(_reference(pipe, guidance=1.0) - reference).max())
    print(f"skyreels-v2 cfg2xU2: max |frames - {leader['pipeline']}| = {err:.3g}; without CFG {no_cfg:.3g}")
    assert err <= FRAME_TOL, err
    assert no_cfg > 100 * FRAME_TOL, no_cfg
    for rank in four_ranks:
        r = rank["cfg2xU2"]
        assert r["passes"] == STEPS and r["rows"] == [1] * (2 * STEPS), (r["passes"], r["rows"])
    for rank in four_ranks[1:]:
        assert rank["cfg2xU2"]["outputs"] == [] and len(rank["cfg2xU2"]["step_ms"]) == STEPS


@pytest.mark.parametrize("preset, needle", [("skyreels-v2-i2v-14b-540p", "SkyReelsV2ImageToVideoPipeline"),
                                            ("skyreels-v2-df-1.3b-540p", "inject_sample_info")])
def test_image_to_video_and_df_1_3b_generate_are_refused_in_one_line(preset, needle):
    from sporch.orchestrator.errors import SporchError

    job = job_from_dict({"name": "g", "model": {"preset": preset},
                         "workload": {**WORKLOAD, "height": 544, "width": 960, "frames": 97}})
    with pytest.raises(SporchError, match="workload.kind generate is not built for") as exc:
        make_plan(find_cluster("local"), job)
    assert needle in str(exc.value) and "\n" not in str(exc.value), str(exc.value)
