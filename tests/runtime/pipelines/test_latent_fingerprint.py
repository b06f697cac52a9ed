"""The saved latents' fingerprint changes with everything that changes the latents, so a re-run
of an edited job never decodes stale latents (runtime/pipelines/latent_files.py)."""

from __future__ import annotations

import dataclasses

import pytest

pytest.importorskip("torch")

from sporch.runtime.pipelines.latent_files import fingerprint  # noqa: E402
from sporch.runtime.pipelines.params import GenerateParams  # noqa: E402


def params(tmp_path, **kw) -> GenerateParams:
    base = dict(family="wan", model={"preset": "tiny", "lora": None}, root=str(tmp_path), tiny_weights=True,
                prompts=("a fox",), negative_prompt=None, seed=1, steps=4, guidance_scale=5.0, cfg=True, shift=None,
                scheduler=None, output_format="mp4", fps=16, frames=5, height=32, width=32, text_len=8,
                dtype="float32", batch=1, grid=(2, 2, 2))
    return GenerateParams(**{**base, **kw})


def test_every_input_of_the_latents_changes_the_fingerprint(tmp_path):
    image = tmp_path / "first.png"
    image.write_bytes(b"one")
    s = params(tmp_path, image=str(image))
    fp = fingerprint(s, 0)
    assert fingerprint(params(tmp_path, image=str(image)), 0) == fp  # deterministic
    for change in ({"guidance_scale_2": 3.0}, {"model": {"preset": "tiny", "lora": [{"path": "a", "scale": 1.0}]}},
                   {"seed": 2}, {"steps": 5}, {"image": None}):
        assert fingerprint(dataclasses.replace(s, **change), 0) != fp, change
    image.write_bytes(b"two")  # the same path, another first frame
    assert fingerprint(s, 0) != fp
