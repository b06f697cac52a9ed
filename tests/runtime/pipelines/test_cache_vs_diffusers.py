"""First-block cache against diffusers' own (``transformer.enable_cache(FirstBlockCacheConfig)``)
on the tiny random Wan pipeline, one process, no CFG (diffusers' hook keeps one state per
transformer, so with CFG's two calls per step its decision is not per step): the same steps
skipped give the same frames (FRAME_TOL, test_generate.py's: float32 rounding only; a
different skip pattern moves them by far more, as the uncached frames show)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch

pytest.importorskip("diffusers")

from .test_generate import FRAME_TOL, _plan  # noqa: E402

PROMPT, SEED, STEPS = "a red fox running in snow", 11, 8
WORKLOAD = dict(kind="generate", frames=9, height=80, width=48, steps=STEPS, guidance_scale=1.0, dtype="float32",
                seed=SEED, prompt=PROMPT)


def _diffusers(folder: Path, threshold: float | None):
    from diffusers import FirstBlockCacheConfig, WanPipeline

    pipe = WanPipeline.from_pretrained(folder, dtype=torch.float32)
    if threshold is not None:
        pipe.transformer.enable_cache(FirstBlockCacheConfig(threshold=threshold))
    return pipe(prompt=PROMPT, height=80, width=48, num_frames=9, num_inference_steps=STEPS, guidance_scale=1.0,
                max_sequence_length=8, output_type="np", generator=torch.Generator().manual_seed(SEED)).frames[0]


def _sporch(folder: Path, out: Path, threshold: float):
    from sporch.runtime.pipelines.generate import run_generate

    cache = {"method": "fbcache", "threshold": threshold, "warmup_steps": 0, "max_consecutive": 0}
    plan = _plan({"weights": str(folder), "text_len": 8}, {**WORKLOAD, "cache": cache}, {"ulysses": 4}, "fbc")
    frames = {}
    got = run_generate(plan, None, torch.device("cpu"), out, frames_sink=lambda i, f: frames.__setitem__(i, f))
    return np.asarray(frames[0]), got["step_cache"]["batches"][0]["contexts"]["cond"]  # the prompt's "cond" context


@pytest.mark.parametrize("threshold", [0.42, 0.45])
def test_fbcache_equals_diffusers_first_block_cache(tmp_path, threshold):
    from sporch.runtime.pipelines.tiny import save_tiny_pipeline

    model = _plan({"preset": "tiny"}, WORKLOAD, {}, "probe").model
    save_tiny_pipeline("wan", tmp_path / "wan", seed=1, config=model.diffusers_config, text_len=8)
    ref = _diffusers(tmp_path / "wan", threshold)
    got, rec = _sporch(tmp_path / "wan", tmp_path / "out", threshold)
    assert rec["skipped"] and STEPS - 1 in rec["computed"], rec  # the last step is computed either way here
    err = float(np.abs(got - ref).max())
    assert err <= FRAME_TOL, (err, rec)
    # the comparison can fail: without the cache the frames are far from the cached ones
    assert float(np.abs(_diffusers(tmp_path / "wan", None) - ref).max()) > 100 * FRAME_TOL
