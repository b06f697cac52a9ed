"""``pipeline.vae: tiled`` on the generic path's generate, world 1 (the leader decodes): the frames
equal diffusers' own pipeline on the same folder with ``pipe.vae.enable_tiling()`` (no arguments:
the VAE class's default tile sizes, which sporch uses too) within test_generate's FRAME_TOL, for
SD3.5 (AutoencoderKL) and CogVideoX (AutoencoderKLCogVideoX).

The tiny folders' VAEs (runtime/pipelines/tiny.py) set the class defaults small: SD3's
``sample_size`` 32 (32-pixel tiles: 4 x 4 latents), CogVideoX's ``sample_height/width`` 96 x 80 (half:
48 x 40-pixel tiles, 6 x 5 latents), so the 64 x 48 image's 8 x 6 latent is split into several overlapping tiles: the
decoder runs more often than untiled (counted) and the blended frames differ from the untiled ones
far beyond the tolerance (else the comparison would prove nothing).
"""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
import torch

pytest.importorskip("diffusers")
pytest.importorskip("imageio_ffmpeg")

from sporch.orchestrator.config.cluster import find_cluster  # noqa: E402
from sporch.orchestrator.config.job import job_from_dict  # noqa: E402
from sporch.orchestrator.plan.planner import make_plan  # noqa: E402

FRAME_TOL = 1e-4  # as test_generate.py
PROMPT, NEGATIVE, SEED, STEPS, GUIDANCE = "a red fox running in snow", "blurry low quality", 7, 2, 4.0
HEIGHT, WIDTH = 64, 48
FAMILIES = ("sd3", "cogvideox")
FRAMES = {"cogvideox": 9}


@pytest.fixture(scope="module")
def folders(tmp_path_factory):
    from sporch.runtime.pipelines.tiny import save_tiny_pipeline

    root = tmp_path_factory.mktemp("generic-tiled")
    return {fam: save_tiny_pipeline(fam, root / fam, seed=i + 1) for i, fam in enumerate(FAMILIES)}


def _reference(folder, fam: str, tiled: bool) -> tuple[np.ndarray, int]:
    """diffusers' pipeline on the folder, float32, its VAE tiled with ``enable_tiling()`` or
    whole: ([F, H, W, 3] frames, how many times its decoder ran)."""
    from diffusers import DiffusionPipeline

    pipe = DiffusionPipeline.from_pretrained(str(folder), dtype=torch.float32)
    pipe.set_progress_bar_config(disable=True)
    if tiled:
        pipe.vae.enable_tiling()
    calls = []
    pipe.vae.decoder.register_forward_hook(lambda m, a, o: calls.append(1))
    kw = {"num_frames": FRAMES[fam], "max_sequence_length": pipe.transformer.config.max_text_seq_length} \
        if fam in FRAMES else {}
    out = pipe(prompt=PROMPT, negative_prompt=NEGATIVE, height=HEIGHT, width=WIDTH, num_inference_steps=STEPS,
               guidance_scale=GUIDANCE, generator=torch.Generator().manual_seed(SEED), output_type="np", **kw)
    frames = np.asarray(out.frames)[0] if fam in FRAMES else np.asarray(out.images)[0][None]
    return frames.astype(np.float32), len(calls)


@pytest.mark.parametrize("fam", FAMILIES)
def test_tiled_generate_frames_equal_the_pipeline_with_enable_tiling(folders, fam, tmp_path):
    from sporch.runtime.pipelines.generate import run_generate

    workload = dict(kind="generate", prompt=PROMPT, negative_prompt=NEGATIVE, height=HEIGHT, width=WIDTH,
                    steps=STEPS, guidance_scale=GUIDANCE, dtype="float32", seed=SEED,
                    **({"frames": FRAMES[fam]} if fam in FRAMES else {}))
    job = job_from_dict({"name": "t", "model": {"weights": str(folders[fam])}, "workload": workload,
                         "parallel": {"cfg": 1, "ulysses": 1, "ring": 1, "dp": 1}, "pipeline": {"vae": "tiled"}})
    plan = make_plan(dataclasses.replace(find_cluster("local"), gpus_per_node=1), job)
    assert (plan.model.family, plan.layout.world_size, plan.placement.vae) == (fam, 1, "tiled")
    frames = {}
    metrics = run_generate(plan, None, torch.device("cpu"), tmp_path, frames_sink=lambda i, f: frames.__setitem__(i, f))
    assert metrics["vae"] == "tiled"
    tiled, tiles = _reference(folders[fam], fam, tiled=True)
    whole, calls = _reference(folders[fam], fam, tiled=False)
    assert frames[0].shape == tiled.shape == (FRAMES.get(fam, 1), HEIGHT, WIDTH, 3) and tiled.std() > 0.02
    err = float(np.abs(frames[0] - tiled).max())
    effect = float(np.abs(tiled - whole).max())
    print(f"{fam} tiled: max |frames - diffusers enable_tiling()| = {err:.3g}; tiled vs whole {effect:.3g}; "
          f"decoder calls {tiles} tiled, {calls} whole")
    assert tiles >= 2 * calls, (tiles, calls)  # the latent really was split into tiles
    assert effect > 100 * FRAME_TOL, effect  # and tiling changes the frames: the comparison can fail
    assert err <= FRAME_TOL, (fam, err)
