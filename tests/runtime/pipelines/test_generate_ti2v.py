"""Wan2.2 TI2V-5B (``expand_timesteps``) against diffusers: the transformer with one timestep per
token, and text- and image-to-video generation against ``WanPipeline`` /
``WanImageToVideoPipeline`` with ``expand_timesteps``.

A tiny random TI2V folder (the wan family's ``tiny_pipeline``: the Wan2.2 VAE with 2 x 2 pixels
folded into channels and strides 4 x 16 x 16, ``expand_timesteps`` in model_index.json) is saved in
the diffusers layout; sporch plans from the folder alone. The sequence-parallel transformer is
compared with the unsharded class (TOL, float32) on the first frame's tokens at 0 and the others at
each sample's timestep, U4 / R4 / U2R2 (the split plan cuts the per-token timesteps with the
tokens; 36 tokens over 4 ranks in uneven chunks). Frames are compared with FRAME_TOL of
test_generate.py: the same pipeline on the same inputs, float32, 4 steps.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

pytest.importorskip("diffusers")
pytest.importorskip("imageio_ffmpeg")

from sporch.orchestrator.config.cluster import find_cluster  # noqa: E402
from sporch.orchestrator.config.job import job_from_dict  # noqa: E402
from sporch.orchestrator.config.job_spec import ModelSpec  # noqa: E402
from sporch.orchestrator.errors import SporchError  # noqa: E402
from sporch.orchestrator.plan.experts import expand_timesteps  # noqa: E402
from sporch.orchestrator.plan.planner import make_plan  # noqa: E402
from sporch.runtime.testing import run_distributed  # noqa: E402

from .test_generate import FRAME_TOL  # noqa: E402
from .test_generate_wan22 import _run, run_world  # noqa: E402  (one generate run, unsharded or on a rank; several on 4 ranks)

TOL = 1e-5
PROMPT = "a red fox running in snow"
NEGATIVE = "blurry low quality"
STEPS, SEED = 4, 11
# 5 frames of 96 x 64: 2 latent frames of 6 x 4 (stride 16), 2 x 3 x 2 = 12 tokens (the transformer's own test
# below: 36); a first latent frame (the image's) and one more is all the generation tests need
FRAMES, HEIGHT, WIDTH = 5, 96, 64
WORKLOAD = dict(kind="generate", frames=FRAMES, height=HEIGHT, width=WIDTH, steps=STEPS, guidance_scale=5.0,
                negative_prompt=NEGATIVE, dtype="float32", seed=SEED, prompt=PROMPT)
LAYOUTS = {"U4": dict(ulysses=4), "R4": dict(ring=4), "U2R2": dict(ulysses=2, ring=2)}


def _plan(model: dict, parallel: dict, workload: dict = WORKLOAD):
    job = {"name": "ti2v", "model": model, "workload": workload, "parallel": parallel}
    return make_plan(find_cluster("local"), job_from_dict(job))


@pytest.fixture(scope="module")
def ti2v(tmp_path_factory):
    from PIL import Image

    from sporch.runtime.models.families.wan import TINY
    from sporch.runtime.pipelines.tiny import save_tiny_pipeline

    root = tmp_path_factory.mktemp("ti2v")
    save_tiny_pipeline("wan", root / "ti2v", seed=3, config=TINY, text_len=8, vae_stride=(4, 16, 16),
                      expand_timesteps=True)
    pixels = (np.random.default_rng(0).random((50, 70, 3)) * 255).astype(np.uint8)
    Image.fromarray(pixels).save(root / "first.png")
    return {"folder": root / "ti2v", "image": root / "first.png"}


def _folder_plan(ti2v, parallel: dict, image: bool = False):
    workload = {**WORKLOAD, "image": str(ti2v["image"])} if image else WORKLOAD
    return _plan({"weights": str(ti2v["folder"]), "text_len": 8}, parallel, workload)


def test_the_folder_says_one_timestep_per_token(ti2v, tmp_path):
    plan = _folder_plan(ti2v, {"ulysses": 4})
    assert plan.model.expand_timesteps and plan.model.vae_stride == [4, 16, 16]
    assert list(plan.sequence.grid) == [2, 3, 2]
    assert not _plan({"preset": "tiny"}, {}).model.expand_timesteps
    assert _plan({"preset": "wan2.2-ti2v-5b"}, {}, dict(WORKLOAD, frames=121, height=704, width=1280)).model.expand_timesteps
    # a published preset and a folder that disagree: one line
    index = tmp_path / "model_index.json"
    index.write_text('{"_class_name": "WanPipeline", "expand_timesteps": false}')
    with pytest.raises(SporchError, match="expand_timesteps false disagrees with model.preset wan2.2-ti2v-5b"):
        expand_timesteps(ModelSpec(preset="wan2.2-ti2v-5b", weights=str(tmp_path)))


# -- the transformer -----------------------------------------------------------------------------
def _inputs():
    g = torch.Generator().manual_seed(5)
    x = torch.randn(2, 4, 3, 8, 6, generator=g)  # 3 x 4 x 3 = 36 tokens
    t = torch.tensor([[800.0], [150.0]]).expand(2, 36).clone()
    t[:, :12] = 0  # the first latent frame's tokens
    return x, t, torch.randn(2, 8, 32, generator=g)


def _per_token_sharded(cases):
    from sporch.runtime.models.runner import ShardedTransformer
    from sporch.runtime.models.build import load_diffusers
    from sporch.runtime.parallel import ParallelContext

    out = {}
    for name, layout, folder in cases:
        ctx = ParallelContext.from_layout(**layout)
        x, t, text = _inputs()
        runner = ShardedTransformer(load_diffusers(folder), ctx)
        out[name] = runner.forward(hidden_states=x, timestep=t, encoder_hidden_states=text, return_dict=False)
        ctx.close()
    return out


def test_per_token_timesteps_run_sequence_parallel_equal_to_the_class(ti2v):
    from sporch.runtime.models.build import load_diffusers

    theirs = load_diffusers(ti2v["folder"])
    x, t, text = _inputs()
    with torch.no_grad():
        ref = theirs(x, t, text, return_dict=False)[0]
        per_sample = theirs(x, t[:, -1], text, return_dict=False)[0]
    scale = float(ref.abs().max())
    # the first frame's timestep matters: one timestep per sample is far off
    assert scale > 0.3 and float((per_sample - ref).abs().max()) / scale > 1000 * TOL
    ranks = run_distributed(_per_token_sharded, 4, [(n, lay, str(ti2v["folder"])) for n, lay in LAYOUTS.items()],
                            timeout=300)
    for rank_out in ranks:
        for name, out in rank_out.items():
            err = float((out - ref).abs().max()) / scale
            assert err <= TOL, (name, err)


# -- generation ----------------------------------------------------------------------------------
def _reference(ti2v, image=None):
    from diffusers import WanImageToVideoPipeline, WanPipeline
    from PIL import Image

    pipe = WanPipeline.from_pretrained(ti2v["folder"], dtype=torch.float32)
    assert pipe.config.expand_timesteps
    args = dict(prompt=PROMPT, negative_prompt=NEGATIVE, height=HEIGHT, width=WIDTH, num_frames=FRAMES,
                num_inference_steps=STEPS, guidance_scale=5.0, max_sequence_length=8, output_type="np",
                generator=torch.Generator().manual_seed(SEED))
    if image is None:
        return pipe(**args).frames[0]
    pipe = WanImageToVideoPipeline(**pipe.components, image_encoder=None, image_processor=None,
                                   expand_timesteps=True)
    return pipe(image=Image.open(image).convert("RGB"), **args).frames[0]


@pytest.fixture(scope="module")
def t2v_reference(ti2v):
    """WanPipeline's text-to-video frames, once for the tests that compare with them."""
    return _reference(ti2v)


def _vae_parallel_plan(ti2v):
    job = {"name": "ti2v", "model": {"weights": str(ti2v["folder"]), "text_len": 8}, "workload": WORKLOAD,
           "parallel": {"ulysses": 2, "ring": 2}, "pipeline": {"vae": "parallel"}}
    return make_plan(find_cluster("local"), job_from_dict(job))


@pytest.fixture(scope="module")
def u2r2(ti2v, tmp_path_factory):
    """One 4-rank world for every sharded generate of the module: text- and image-to-video U2R2,
    and text-to-video U2R2 with the parallel VAE (test_the_wan22_vae_decodes_in_parallel_rows)."""
    plans = {"t2v": _folder_plan(ti2v, {"ulysses": 2, "ring": 2}, image=False),
             "i2v": _folder_plan(ti2v, {"ulysses": 2, "ring": 2}, image=True),
             "vae-parallel": _vae_parallel_plan(ti2v)}
    return run_world(plans, tmp_path_factory.mktemp("ti2v-u2r2"))


def _writers(u2r2, name: str):
    return [r[name] for r in u2r2["ranks"] if r[name]["frames"]]


def _generate_both(ti2v, u2r2, tmp_path, image: bool):
    plain = _run(_folder_plan(ti2v, {"ulysses": 4}, image).to_json(), str(tmp_path / "one"), unsharded=True)
    writers = _writers(u2r2, "i2v" if image else "t2v")
    assert len(writers) == 1
    return {"unsharded": plain, "U2R2": writers[0]}


def test_text_to_video_equals_wan_pipeline(ti2v, t2v_reference, u2r2, tmp_path):
    ref = t2v_reference
    for name, got in _generate_both(ti2v, u2r2, tmp_path, image=False).items():
        err = np.abs(got["frames"][0] - ref).max()
        print(f"ti2v text-to-video {name}: max |frames - WanPipeline| = {err:.3g}")
        assert ref.std() > 0.02 and err <= FRAME_TOL, (name, err)


def test_image_to_video_equals_wan_image_to_video_pipeline(ti2v, t2v_reference, u2r2, tmp_path):
    """The first latent frame is the image's; another image moves the frames far beyond the
    tolerance, and so does denoising the first frame too (the image's latent only as the start)."""
    from PIL import Image

    ref = _reference(ti2v, ti2v["image"])
    for name, got in _generate_both(ti2v, u2r2, tmp_path, image=True).items():
        err = np.abs(got["frames"][0] - ref).max()
        print(f"ti2v image-to-video {name}: max |frames - WanImageToVideoPipeline| = {err:.3g}")
        assert err <= FRAME_TOL, (name, err)
    Image.fromarray(np.zeros((50, 70, 3), np.uint8)).save(tmp_path / "black.png")
    other = _reference(ti2v, tmp_path / "black.png")
    assert ref.std() > 0.02 and np.abs(other - ref).max() > 100 * FRAME_TOL
    assert np.abs(t2v_reference - ref).max() > 100 * FRAME_TOL


def test_the_wan22_vae_decodes_in_parallel_rows(t2v_reference, u2r2):
    """``pipeline.vae: parallel`` on the Wan2.2 VAE (pixels folded 2 x 2, residual up blocks):
    the rows of the latent split over the U2R2 sequence group, the frames as WanPipeline's."""
    ref = t2v_reference
    assert u2r2["plans"]["vae-parallel"].placement.vae == "parallel"
    writers = _writers(u2r2, "vae-parallel")  # on the module's one 4-rank world
    err = np.abs(writers[0]["frames"][0] - ref).max()
    print(f"ti2v parallel VAE U2R2: max |frames - WanPipeline| = {err:.3g}")
    assert len(writers) == 1 and err <= FRAME_TOL
