"""``model.quant`` in the runtime (issue 36): int8 weights on the CPU through torchao, the block
linears only, close to float32; the float8 modes and sharded weights refused in one line. On the
diffusers classes every model runs as (Wan's cross attention, Flux's joint attention)."""

from __future__ import annotations

import pytest
import torch
from torch import nn

pytest.importorskip("torchao")
pytest.importorskip("diffusers")

from sporch.runtime.models.build import random_diffusers  # noqa: E402
from sporch.runtime.models.families import family_module  # noqa: E402
from sporch.runtime.models.placed import build_transformer  # noqa: E402
from sporch.runtime.models.quant import QuantError, block_linears, quantize_weights, weight_bytes  # noqa: E402
from sporch.runtime.models.shard_weights import resident_parameter_bytes  # noqa: E402

#: int8 with a scale per output row: each weight within half a step (max|row| / 127 / 2); through
#: the tiny models' blocks the output moves by well under 2% of its largest value
REL_TOL = 0.02
CLASSES = {"wan": "WanTransformer3DModel", "flux": "FluxTransformer2DModel"}


def _model(family: str):
    return random_diffusers(CLASSES[family], dict(family_module(family).TINY), seed=3)


def _inputs(family: str):
    fm = family_module(family)
    return fm.inputs(fm.TINY, batch=2, grid=(3, 3, 4), text_len=5, generator=torch.Generator().manual_seed(0))


@pytest.mark.parametrize("family", ["wan", "flux"])
def test_int8_weights_close_to_float32_and_one_byte_per_weight(family):
    plain = _model(family)
    quant = quantize_weights(_model(family), "int8_weight")
    y, yq = plain(**_inputs(family))[0], quant(**_inputs(family))[0]
    err = (y - yq).abs().max().item()
    assert 0 < err <= REL_TOL * y.abs().max().item(), err  # changed (quantised), but close
    # block linears: 1 byte per weight + a float32 scale and an int8 zero point per row; the rest
    # (embeddings, head, biases, norms) stays float32
    lin = block_linears(plain)
    lin_bytes = sum(m.weight.numel() * 4 for m in lin)
    q_bytes = sum(m.weight.numel() + m.weight.shape[0] * 5 for m in lin)
    assert weight_bytes(quant) == weight_bytes(plain) - lin_bytes + q_bytes
    assert weight_bytes(quant) < 0.9 * weight_bytes(plain)
    # what a benchmark records per rank counts the same bytes
    assert resident_parameter_bytes(quant) == weight_bytes(quant)
    assert resident_parameter_bytes(plain) == weight_bytes(plain)
    # only the blocks are quantised
    assert all(type(p) is nn.Parameter for n, p in quant.named_parameters() if "blocks" not in n)


@pytest.mark.parametrize("mode", ["fp8_weight", "fp8_dynamic"])
def test_float8_refused_on_cpu_in_one_line(mode):
    with pytest.raises(QuantError, match=f"model.quant={mode} needs a CUDA GPU") as err:
        quantize_weights(_model("wan"), mode)
    assert "\n" not in str(err.value)


def test_quant_with_sharded_weights_refused():
    with pytest.raises(QuantError, match="parallel.shard_weights=sequence shards them"):
        build_transformer(weights=None, class_name=CLASSES["wan"], config=dict(family_module("wan").TINY),
                          ctx=object(), shard_weights="sequence", quant="int8_weight")


def test_none_leaves_the_model_alone():
    m = _model("wan")
    before = weight_bytes(m)
    assert quantize_weights(m, "none") is m and weight_bytes(m) == before
    assert all(type(p) is nn.Parameter for p in m.parameters())
