"""Every model's outputs are checked for NaN/inf (issue 32 item 6): a NaN output would otherwise compare as "within tolerance" (max(0, nan) is 0) and a benchmark
would time NaNs. One process, a tiny LTX-Video model with one weight poisoned."""

from __future__ import annotations

import pytest
import torch

pytest.importorskip("diffusers")

from sporch.runtime.models.finite import NonFiniteOutput  # noqa: E402
from sporch.runtime.models.build import random_diffusers  # noqa: E402
from sporch.runtime.models.families import ltx  # noqa: E402
from sporch.runtime.models.runner import verify_model  # noqa: E402


def _model_and_inputs():
    model = random_diffusers("LTXVideoTransformer3DModel", dict(ltx.TINY), seed=0)
    inputs = ltx.inputs(ltx.TINY, batch=1, grid=(1, 2, 2), text_len=3, generator=torch.Generator().manual_seed(0))
    return model, inputs


def test_a_finite_model_verifies():
    model, inputs = _model_and_inputs()
    out = verify_model(model, None, inputs, batched=ltx.BATCHED)
    assert out["max_abs_err"] == 0.0 and out["ref_max_abs"] > 0


def test_a_nan_output_is_a_failed_verify_not_a_pass():
    model, inputs = _model_and_inputs()
    with torch.no_grad():
        next(p for n, p in model.named_parameters() if n.endswith("proj_out.weight")).fill_(float("nan"))
    with pytest.raises(NonFiniteOutput, match="verify"):
        verify_model(model, None, inputs, batched=ltx.BATCHED)
