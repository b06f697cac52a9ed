"""``model.quant`` in the runtime (issue 36): int8 weights on the CPU through torchao, the block
linears only, close to float32; the float8 modes and sharded weights refused in one line."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from sporch.runtime.model import build_model, build_sharded, make_inputs, resident_parameter_bytes, tiny_model_dict
from sporch.runtime.model.quant import QuantError, block_linears, quantize_weights, weight_bytes

pytest.importorskip("torchao")

#: int8 with a scale per output row: each weight within half a step (max|row| / 127 / 2); through
#: the tiny models' blocks the output moves by well under 2% of its largest value
REL_TOL = 0.02


@pytest.mark.parametrize("kind", ["cross", "joint"])
def test_int8_weights_close_to_float32_and_one_byte_per_weight(kind):
    plain = build_model(tiny_model_dict(kind), seed=3)
    quant = quantize_weights(build_model(tiny_model_dict(kind), seed=3), "int8_weight")
    inp = make_inputs(plain, (3, 3, 4), 2, 0)
    t = torch.tensor([700.0, 250.0])
    y, yq = plain(inp.noise, t, inp.cond), quant(inp.noise, t, inp.cond)
    err = (y - yq).abs().max().item()
    assert 0 < err <= REL_TOL * y.abs().max().item(), err  # changed (quantised), but close
    # block linears: 1 byte per weight + a float32 scale and an int8 zero point per row; the rest
    # (embeddings, head, biases, norms) stays float32
    lin = block_linears(plain)
    lin_bytes = sum(m.weight.numel() * 4 for m in lin)
    q_bytes = sum(m.weight.numel() + m.weight.shape[0] * 5 for m in lin)
    assert weight_bytes(quant) == weight_bytes(plain) - lin_bytes + q_bytes
    assert weight_bytes(quant) < 0.6 * weight_bytes(plain)
    # what a benchmark records per rank (metrics.parameter_bytes_resident) counts the same bytes
    assert resident_parameter_bytes(quant) == weight_bytes(quant)
    assert resident_parameter_bytes(plain) == weight_bytes(plain)
    # the embeddings and the head are not quantised
    assert all(type(p) is nn.Parameter for n, p in quant.named_parameters() if "blocks" not in n)


@pytest.mark.parametrize("mode", ["fp8_weight", "fp8_dynamic"])
def test_float8_refused_on_cpu_in_one_line(mode):
    with pytest.raises(QuantError, match=f"model.quant={mode} needs a CUDA GPU") as err:
        quantize_weights(build_model(tiny_model_dict("cross")), mode)
    assert "\n" not in str(err.value)


def test_quant_with_sharded_weights_refused():
    with pytest.raises(QuantError, match="parallel.shard_weights=sequence shards them"):
        build_sharded(tiny_model_dict("cross"), object(), "sequence", quant="int8_weight")


def test_none_leaves_the_model_alone():
    m = build_model(tiny_model_dict("cross"))
    before = weight_bytes(m)
    assert quantize_weights(m, "none") is m and weight_bytes(m) == before
    assert all(type(p) is nn.Parameter for p in m.parameters())
