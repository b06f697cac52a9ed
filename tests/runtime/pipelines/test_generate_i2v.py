"""Wan2.1 I2V generate (CLIP image tokens + first-frame latents) against diffusers' own
``WanImageToVideoPipeline``.

A tiny random Wan2.1-I2V pipeline folder (the wan family's ``tiny_pipeline``: the transformer with
``image_dim``, a ``CLIPVisionModel`` image encoder and its ``CLIPImageProcessor``, umT5, the Wan
VAE, UniPC) is saved in the diffusers layout; sporch plans from the folder alone and generates
unsharded and on 4 gloo ranks (U2R2): the leader encodes the image with the text (the pipeline's
``encode_image``) and the replica takes the image tokens from it. Frames are compared with
FRAME_TOL of test_generate.py.
The text is 512 tokens: diffusers' Wan attention takes the last 512 context tokens as the text and
the rest as image tokens, so the reference needs that length.
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
STEPS, SEED, TEXT_LEN, IMAGE_DIM = 3, 11, 512, 16
# 5 frames of 48 x 32: 2 latent frames of 6 x 4 (stride 4 x 8 x 8), 2 x 3 x 2 = 12 tokens (3 per rank on 4)
FRAMES, HEIGHT, WIDTH = 5, 48, 32
WORKLOAD = dict(kind="generate", frames=FRAMES, height=HEIGHT, width=WIDTH, steps=STEPS, guidance_scale=5.0,
                negative_prompt=NEGATIVE, dtype="float32", seed=SEED, prompt=PROMPT)


def _plan(model: dict, parallel: dict, workload: dict):
    job = {"name": "i2v", "model": model, "workload": workload, "parallel": parallel}
    return make_plan(find_cluster("local"), job_from_dict(job))


@pytest.fixture(scope="module")
def i2v(tmp_path_factory):
    """The tiny Wan2.1-I2V folder (4 noise + 4 mask + 4 image latent channels in, 4 out; CLIP tokens
    16 wide) and a first frame of another size than the video's (both pipelines resize it)."""
    from PIL import Image

    from sporch.runtime.models.families.wan import TINY
    from sporch.runtime.pipelines.tiny import save_tiny_pipeline

    root = tmp_path_factory.mktemp("wan21-i2v")
    hidden = TINY["num_attention_heads"] * TINY["attention_head_dim"]
    save_tiny_pipeline("wan", root / "i2v", seed=5, text_len=TEXT_LEN,
                      config={**TINY, "in_channels": 12, "out_channels": 4, "image_dim": IMAGE_DIM,
                              "added_kv_proj_dim": hidden})
    pixels = (np.random.default_rng(0).random((40, 30, 3)) * 255).astype(np.uint8)
    Image.fromarray(pixels).save(root / "first.png")
    return {"folder": root / "i2v", "image": root / "first.png"}


def _reference(i2v, encoder_seed=None):
    """WanImageToVideoPipeline's frames; ``encoder_seed``: its image encoder re-drawn at random."""
    from diffusers import WanImageToVideoPipeline
    from PIL import Image

    from sporch.runtime.models.tiny_parts import randomize

    pipe = WanImageToVideoPipeline.from_pretrained(i2v["folder"], dtype=torch.float32)
    if encoder_seed is not None:
        randomize(pipe.image_encoder, encoder_seed)
    return pipe(image=Image.open(i2v["image"]).convert("RGB"), prompt=PROMPT, negative_prompt=NEGATIVE, height=HEIGHT,
                width=WIDTH, num_frames=FRAMES, num_inference_steps=STEPS, guidance_scale=5.0,
                max_sequence_length=TEXT_LEN, output_type="np",
                generator=torch.Generator().manual_seed(SEED)).frames[0]


def _folder_plan(i2v, parallel: dict):
    return _plan({"weights": str(i2v["folder"]), "text_len": TEXT_LEN}, parallel, {**WORKLOAD, "image": str(i2v["image"])})


def _run(plan_json: str, out: str, unsharded: bool = False):
    from sporch.orchestrator.contract.plan import Plan
    from sporch.runtime.parallel import ParallelContext
    from sporch.runtime.pipelines.generate import run_generate

    plan = Plan.from_json(plan_json)
    ctx = None if unsharded else ParallelContext.from_plan(plan)
    frames = {}
    metrics = run_generate(plan, ctx, torch.device("cpu"), Path(out), frames_sink=lambda i, f: frames.__setitem__(i, f))
    return {**metrics, "frames": frames}


def test_the_folder_plans_a_clip_image_to_video_model(i2v):
    """The folder alone: image_dim from transformer/config.json, the image encoder's folders
    required; no workload.image is refused."""
    from sporch.orchestrator.models.generate_inputs import image_folders, pipeline_problems

    plan = _folder_plan(i2v, {"ulysses": 4})
    folders = image_folders(plan.model)
    assert plan.model.diffusers_config["image_dim"] == IMAGE_DIM and folders == ("image_encoder", "image_processor")
    assert pipeline_problems(i2v["folder"], "wan", folders) == []
    assert "image_encoder/, image_processor/" in pipeline_problems(i2v["folder"].parent, "wan", folders)[0]
    from sporch.orchestrator.errors import SporchError

    with pytest.raises(SporchError, match="is image-to-video: set workload.image"):
        _plan({"weights": str(i2v["folder"]), "text_len": TEXT_LEN}, {}, WORKLOAD)


def test_image_to_video_equals_wan_image_to_video_pipeline(i2v, tmp_path):
    """Unsharded and U2R2 equal WanImageToVideoPipeline; the comparison sees the CLIP tokens (the
    pipeline with another image encoder is far beyond the tolerance; that the first frame's latent
    condition is seen: test_generate_wan22.py)."""
    ref = _reference(i2v)
    plain = _run(_folder_plan(i2v, {"ulysses": 4}).to_json(), str(tmp_path / "one"), unsharded=True)
    out = tmp_path / "u2r2"
    out.mkdir()
    ranks = run_distributed(_run, 4, _folder_plan(i2v, {"ulysses": 2, "ring": 2}).to_json(), str(out), timeout=600)
    sharded = [r for r in ranks if r["frames"]]
    assert len(sharded) == 1
    for name, got in (("unsharded", plain), ("U2R2", sharded[0])):
        err = np.abs(got["frames"][0] - ref).max()
        print(f"wan2.1 i2v {name}: max |frames - WanImageToVideoPipeline| = {err:.3g}")
        assert err <= FRAME_TOL, (name, err)
    assert ref.std() > 0.02
    assert np.abs(_reference(i2v, encoder_seed=99) - ref).max() > 100 * FRAME_TOL
