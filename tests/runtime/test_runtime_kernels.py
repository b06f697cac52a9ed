"""Kernels and the LSE merge, in one process."""

from __future__ import annotations

import math

import pytest
import torch

from runtime.attention import attention_block, available_backends
from runtime.attention.utils import merge_block


def _ref(q, k, v, causal=False):
    s = (q.double() @ k.double().transpose(-1, -2)) / math.sqrt(q.shape[-1])
    if causal:
        s = s.masked_fill(~torch.ones(s.shape[-2], s.shape[-1], dtype=torch.bool).tril(), float("-inf"))
    return torch.softmax(s, -1) @ v.double(), torch.logsumexp(s, -1)


@pytest.mark.parametrize("backend", available_backends("cpu", torch.float32))
@pytest.mark.parametrize("causal", [False, True])
def test_cpu_kernels_return_out_and_lse(backend, causal):
    g = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(2, 3, n, 16, generator=g) for n in (17, 23, 23))
    out, lse = attention_block(q, k, v, causal=causal, backend=backend)
    ro, rl = _ref(q, k, v, causal)
    assert out.shape == (2, 3, 17, 16) and lse.shape == (2, 3, 17)
    assert (out.double() - ro).abs().max() < 2e-6
    assert (lse.double() - rl).abs().max() < 2e-6


def test_auto_prefers_cpu_flash_on_cpu():
    assert available_backends("cpu", torch.float32)[0] == "cpu_flash"
    assert available_backends("cpu", torch.float32)[-1] == "math"


def test_merge_is_exact_and_overflow_free():
    g = torch.Generator().manual_seed(1)
    q = torch.randn(1, 2, 9, 8, generator=g) * 30  # logits ~ 1e3: a naive exp overflows in float32
    k = torch.randn(1, 2, 40, 8, generator=g) * 30
    v = torch.randn(1, 2, 40, 8, generator=g)
    for dtype, tol in [(torch.float64, 1e-12), (torch.float32, 1e-6)]:
        qq, kk, vv = q.to(dtype), k.to(dtype), v.to(dtype)
        out = lse = None
        for lo, hi in [(0, 7), (7, 25), (25, 40)]:
            bo, bl = attention_block(qq, kk[:, :, lo:hi], vv[:, :, lo:hi], backend="math")
            out, lse = merge_block(out, lse, bo, bl)
        # the same kernel on one block: merging adds no error of its own
        one, one_lse = attention_block(qq, kk, vv, backend="math")
        assert torch.isfinite(out).all() and torch.isfinite(lse).all()
        assert (out - one).abs().max() < tol
        assert ((lse - one_lse).abs() / one_lse.abs()).max() < tol
    ro, rl = _ref(q.double(), k.double(), v.double())
    assert (out.double() - ro).abs().max() < 1e-3  # float32 logits of ~1e3 carry ~1e-4 error themselves


def test_unknown_backend():
    with pytest.raises(ValueError, match="unknown attention backend"):
        attention_block(torch.zeros(1, 1, 2, 4), torch.zeros(1, 1, 2, 4), torch.zeros(1, 1, 2, 4), backend="nope")


CUDA_TOL = {torch.float32: 2e-3, torch.bfloat16: 3e-2, torch.float16: 5e-3}  # TF32 / half inputs


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device (no GPU on this machine)")
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16])
@pytest.mark.parametrize("causal", [False, True])
def test_cuda_kernels_return_out_and_lse(dtype, causal):
    """Every CUDA backend present (flash_attn, torch flash/efficient/cuDNN) returns the same
    (out, lse) contract as the CPU ones: [B, H, Sq, D] and [B, H, Sq] (float32 lse)."""
    g = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(2, 4, n, 64, generator=g) for n in (130, 130, 130))
    ro, rl = _ref(q, k, v, causal)
    backends = [b for b in available_backends("cuda", dtype) if b != "math"]
    assert backends, "CUDA is present but no fast kernel is usable"
    for backend in backends:
        out, lse = attention_block(*(t.cuda().to(dtype) for t in (q, k, v)), causal=causal, backend=backend)
        assert out.shape == (2, 4, 130, 64) and lse.shape == (2, 4, 130), backend
        assert (out.double().cpu() - ro).abs().max() < CUDA_TOL[dtype], backend
        assert (lse.double().cpu() - rl).abs().max() < CUDA_TOL[dtype] * 10, backend
