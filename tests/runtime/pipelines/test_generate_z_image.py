"""`workload.kind: generate` for Z-Image (a shipped split plan) against diffusers' ``ZImagePipeline``.

A tiny random Z-Image folder in Z-Image-Turbo's layout (the family's ``tiny_pipeline``:
ZImageTransformer2DModel, a two-layer Qwen3Model, FLUX.1's AutoencoderKL layout, the flow-matching Euler
scheduler; seeded weights, the word-level tokenizer with a chat template; nothing downloaded) is
generated from with sporch's generate workload on 4 gloo ranks, float32: U2R2, and cfg 2 x U2 (the
pipeline's one call per step holds both CFG passes as list entries [prompt, negative]: each cfg rank
computes one, ``PipelineCfg.BATCHED``, and the per-sample outputs are gathered), both in one spawned
world. The leader's image is compared with ``ZImagePipeline`` loaded from the same folder and run
unsharded (same prompt, negative prompt, seed, steps, guidance) within test_generate.py's FRAME_TOL;
guidance off (0: the pipeline's scale counts from 0) moves the image far beyond it, so the comparison
can fail. A scale in (0, 1] is refused at plan time in one line.
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
SEED, STEPS, GUIDANCE = 7, 3, 4.0
HEIGHT, WIDTH = 64, 48  # latents 8 x 6: 4 x 3 = 12 image tokens (padded to 32 by the class)
WORKLOAD = dict(kind="generate", prompt=PROMPT, negative_prompt=NEGATIVE, height=HEIGHT, width=WIDTH,
                steps=STEPS, guidance_scale=GUIDANCE, dtype="float32", seed=SEED)
CASES = {"U2R2": {"ulysses": 2, "ring": 2}, "cfg2xU2": {"cfg": 2, "ulysses": 2, "ring": 1}}


def _plan(folder: Path, parallel: dict):
    return plan_for(folder, WORKLOAD, parallel)


@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    from sporch.runtime.pipelines.tiny import save_tiny_pipeline

    root = tmp_path_factory.mktemp("z-image")
    return save_tiny_pipeline("z-image", root / "pipe", seed=3)


@pytest.fixture(scope="module")
def pipe(folder):
    from diffusers import ZImagePipeline

    p = ZImagePipeline.from_pretrained(folder, dtype=torch.float32)
    p.set_progress_bar_config(disable=True)
    return p


def _reference(pipe, guidance: float = GUIDANCE) -> np.ndarray:
    """[1, H, W, 3]: ZImagePipeline on the folder, as a user would call it (its default text length)."""
    out = pipe(prompt=PROMPT, negative_prompt=NEGATIVE, height=HEIGHT, width=WIDTH, num_inference_steps=STEPS,
               guidance_scale=guidance, output_type="np", generator=torch.Generator().manual_seed(SEED))
    return np.asarray(out.images)


@pytest.fixture(scope="module")
def reference(pipe):
    return _reference(pipe)


@pytest.fixture(scope="module")
def four_ranks(folder, tmp_path_factory):
    # ZImagePipeline passes the latents positionally, a list (one entry per row)
    return run_four_ranks(folder, WORKLOAD, CASES, tmp_path_factory.mktemp("z-image-out"), "layers", latents="list")


def test_the_plan_runs_z_image_pipeline(folder):
    plan = _plan(folder, CASES["U2R2"])
    assert plan.model.family == "z-image" and plan.model.diffusers_class == "ZImageTransformer2DModel"
    assert plan.model.vae_stride == [1, 8, 8]


def test_u2r2_frames_equal_the_diffusers_pipeline(four_ranks, reference):
    """U2R2: the leader's image equals ZImagePipeline's unsharded; the other ranks encode, decode and
    write nothing; every rank ran every step, one call per step on both CFG passes."""
    assert reference.shape == (1, HEIGHT, WIDTH, 3) and reference.std() > 0.02  # not flat
    leader = four_ranks[0]["U2R2"]
    err = float(np.abs(leader["frames"][0] - reference).max())
    print(f"z-image U2R2: max |frames - {leader['pipeline']}| = {err:.3g}")
    assert leader["pipeline"] == "ZImagePipeline"
    assert err <= FRAME_TOL, err
    assert len(leader["outputs"]) == 1 and leader["roles"] == ["text_encoder", "vae"]
    for rank in four_ranks:
        assert rank["U2R2"]["passes"] == STEPS and rank["U2R2"]["rows"] == [2] * STEPS
    for rank in four_ranks[1:]:
        r = rank["U2R2"]
        assert r["frames"] == {} and r["outputs"] == [] and r["roles"] == [] and len(r["step_ms"]) == STEPS


def test_cfg2_frames_equal_the_diffusers_pipeline_and_guidance_matters(four_ranks, reference, pipe):
    """cfg 2 x U2: the leader's image equals the pipeline's; each rank's blocks ran once per step on
    one of the call's two list entries (its cfg rank's); guidance off (0) moves the image far beyond
    the tolerance."""
    leader = four_ranks[0]["cfg2xU2"]
    err = float(np.abs(leader["frames"][0] - reference).max())
    no_cfg = float(np.abs(_reference(pipe, guidance=0.0) - reference).max())
    print(f"z-image cfg2xU2: max |frames - {leader['pipeline']}| = {err:.3g}; without CFG {no_cfg:.3g}")
    assert err <= FRAME_TOL, err
    assert no_cfg > 100 * FRAME_TOL, no_cfg
    for rank in four_ranks:
        r = rank["cfg2xU2"]
        assert r["passes"] == STEPS and r["rows"] == [1] * STEPS, (r["passes"], r["rows"])  # its half
    for rank in four_ranks[1:]:
        assert rank["cfg2xU2"]["outputs"] == [] and len(rank["cfg2xU2"]["step_ms"]) == STEPS


@pytest.mark.parametrize("guidance", [0.5, 1.0])
def test_a_scale_the_pipeline_counts_from_zero_is_refused_between_0_and_1(folder, guidance):
    """ZImagePipeline guides for any scale above 0, sporch from 1: a scale in (0, 1] is refused in one line."""
    from sporch.orchestrator.errors import SporchError

    job = job_from_dict({"name": "g", "model": {"weights": str(folder)},
                         "workload": {**WORKLOAD, "guidance_scale": guidance, "negative_prompt": None}})
    with pytest.raises(SporchError, match="guides for any scale above 0") as exc:
        make_plan(find_cluster("local"), job)
    assert "\n" not in str(exc.value), str(exc.value)


def test_per_sample_outputs_of_unequal_shapes_are_refused_before_any_collective():
    """CfgParallel gathers a list of per-sample outputs (Z-Image's) by stacking them: entries of unequal
    shapes cannot be, and are refused in one line."""
    from sporch.runtime.models.cfg_parallel import gather_entries

    with pytest.raises(ValueError, match="unequal shapes") as exc:
        gather_entries([torch.zeros(4, 1, 2, 2), torch.zeros(4, 1, 2, 3)], None)
    assert "\n" not in str(exc.value)
