"""``step_end_arguments`` (runtime/pipelines/denoise.py): the generic generate's step callback reaches
a pipeline through ``callback_on_step_end`` where its call takes it, else through diffusers' older
``callback(step, t, latents)`` (PixArt's pipelines: their ``**kwargs`` swallow ``callback_on_step_end``
unused, so without this no step was timed, stopped or resumed), the latents it returns put in place."""

from __future__ import annotations

import pytest
import torch

from sporch.runtime.pipelines.denoise import step_end_arguments


class _NewStyle:
    def __call__(self, steps=3, callback_on_step_end=None, **kwargs):
        latents = torch.zeros(2)
        for i in range(steps):
            latents = latents + 1
            if callback_on_step_end is not None:
                latents = callback_on_step_end(self, i, 10 - i, {"latents": latents}).get("latents", latents)
        return latents


class _Legacy:
    """As PixArtSigmaPipeline's loop: the callback sees the stepped latents and returns nothing."""

    def __call__(self, steps=3, callback=None, callback_steps=1, **kwargs):
        latents = torch.zeros(2)
        for i in range(steps):
            latents = latents + 1
            if callback is not None and i % callback_steps == 0:
                callback(i, 10 - i, latents)
        return latents


class _Neither:
    def __call__(self, steps=3, **kwargs):
        return torch.zeros(2)


@pytest.mark.parametrize("pipe", [_NewStyle(), _Legacy()], ids=["callback_on_step_end", "legacy callback"])
def test_every_step_reaches_the_callback_and_its_latents_replace_the_loops(pipe):
    seen = []

    def on_step(p, i, t, kwargs):
        seen.append((p is pipe, i, t, kwargs["latents"].tolist()))
        return {"latents": torch.full((2,), 100.0)} if i == 1 else {}  # a resume boundary puts latents back

    out = pipe(**step_end_arguments(pipe, on_step))
    assert seen == [(True, 0, 10, [1.0, 1.0]), (True, 1, 9, [2.0, 2.0]), (True, 2, 8, [101.0, 101.0])]
    assert out.tolist() == [101.0, 101.0]


def test_a_pipeline_without_a_step_callback_is_refused_in_one_line():
    with pytest.raises(ValueError, match="_Neither's call takes no step callback") as exc:
        step_end_arguments(_Neither(), lambda *a: {})
    assert "\n" not in str(exc.value)
