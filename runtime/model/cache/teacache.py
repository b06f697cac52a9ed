"""TeaCache: a cheap probe is compared with the previous step's; its relative L1 change,
mapped through the model's rescale polynomial, accumulates until it reaches the threshold
(then the step is computed and the sum restarts); below it, all blocks are skipped and the
cached residual of the whole block stack is added.

The probe is what the published coefficients were fitted on: Flux.1, the first double
block's modulated image input (per token: its change is reduced over the sequence and CFG
groups); Wan2.1, the time projection ``e0`` (the same on every rank: no reduction needed)."""

from __future__ import annotations

from dataclasses import dataclass

import torch

from .decision import StepCache, probe_change

#: Rescale polynomials (highest degree first) as published in the TeaCache repository
#: (github.com/ali-vilab/TeaCache): TeaCache4FLUX/teacache_flux.py (Flux.1), and
#: TeaCache4Wan2.1/teacache_generate.py for T2V 1.3B and 14B and I2V 14B 480P and 720P with
#: ``use_ret_steps`` (the set fitted on ``e0``; I2V's differ by resolution, hence two presets).
#: Checked against that source, Nov 2026. Models without an entry (tiny
#: stand-ins, resized presets, Wan2.2) use the identity: the raw relative change accumulates.
COEFFICIENTS: dict[str, tuple[float, ...]] = {
    "flux.1-dev": (4.98651651e+02, -2.83781631e+02, 5.58554382e+01, -3.82021401e+00, 2.64230861e-01),
    "flux.1-schnell": (4.98651651e+02, -2.83781631e+02, 5.58554382e+01, -3.82021401e+00, 2.64230861e-01),
    "wan2.1-t2v-1.3b": (-5.21862437e+04, 9.23041404e+03, -5.28275948e+02, 1.36987616e+01, -4.99875664e-02),
    "wan2.1-t2v-14b": (-3.03318725e+05, 4.90537029e+04, -2.65530556e+03, 5.87365115e+01, -3.15583525e-01),
    "wan2.1-i2v-14b-480p": (2.57151496e+05, -3.54229917e+04, 1.40286849e+03, -1.35890334e+01, 1.32517977e-01),
    "wan2.1-i2v-14b-720p": (8.10705460e+03, 2.13393892e+03, -3.72934672e+02, 1.66203073e+01, -4.17769401e-02),
}
IDENTITY = (1.0, 0.0)


def rescale_coefficients(preset: str | None) -> tuple[float, ...]:
    return COEFFICIENTS.get((preset or "").lower(), IDENTITY)


def polyval(coeffs: tuple[float, ...], x: float) -> float:
    y = 0.0
    for c in coeffs:
        y = y * x + c
    return y


@dataclass
class TeaCache(StepCache):
    coefficients: tuple[float, ...] = IDENTITY
    previous_input: torch.Tensor | None = None
    accumulated: float = 0.0

    method = "teacache"

    def run(self, x, first, rest, probe, valid, ctx):
        m = probe(x)
        metric = float("inf")
        if self.previous_input is not None and self.residual is not None:
            metric = probe_change(m, self.previous_input, probe, valid, ctx)
        self.previous_input = m
        skip = False
        if metric != float("inf") and self.policy.may_skip(self.step, self.run_of_skips):
            self.accumulated += polyval(self.coefficients, metric)
            skip = self.accumulated < self.policy.threshold
        if not skip:
            self.accumulated = 0.0
        self.note(skip, metric)
        if skip:
            return x + self.residual
        out = rest(first(x))
        self.residual = out - x
        return out
