"""Kernels and the LSE merge, in one process."""

from __future__ import annotations

import math

import pytest
import torch

from sporch.runtime.attention import attention_block, available_backends
from sporch.runtime.attention.utils import merge_block


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


def _blocks(dtype, n_blocks=4, seed=3):
    """Per-block (out, lse) of one query set against KV split in n_blocks (math kernel, block
    outputs rounded to ``dtype`` like a half-precision kernel's), and the float64 truth."""
    g = torch.Generator().manual_seed(seed)
    q = torch.randn(2, 3, 33, 16, generator=g) * 3
    k = torch.randn(2, 3, 8 * n_blocks + 5, 16, generator=g) * 3
    v = torch.randn(2, 3, 8 * n_blocks + 5, 16, generator=g)
    cuts = [0, 3, 17, 30, k.shape[2]][: n_blocks + 1]
    blocks = []
    for lo, hi in zip(cuts, cuts[1:]):
        bo, bl = attention_block(q.double(), k[:, :, lo:hi].double(), v[:, :, lo:hi].double(), backend="math")
        blocks.append((bo.to(dtype), bl.float()))
    ro, rl = _ref(q, k[:, :, :cuts[-1]], v[:, :, :cuts[-1]])
    return blocks, ro, rl


@pytest.mark.parametrize("dtype,tol", [(torch.float32, 2e-6), (torch.bfloat16, 2 ** -8)])
def test_in_place_merge_matches_float64_reference(dtype, tol):
    """The merge keeps one float32 accumulator (same storage from the first block to the last)
    and its result equals the float64 softmax over all keys within the blocks' own rounding."""
    blocks, ro, rl = _blocks(dtype)
    out, lse = merge_block(None, None, *blocks[0])
    storage = (out.data_ptr(), lse.data_ptr())
    for bo, bl in blocks[1:]:
        out, lse = merge_block(out, lse, bo, bl)
        assert (out.data_ptr(), lse.data_ptr()) == storage
    assert out.dtype == torch.float32 and lse.dtype == torch.float32
    assert (out.double() - ro).abs().max() < tol * ro.abs().max()
    assert (lse.double() - rl).abs().max() < 2e-6 * rl.abs().max()


def test_merge_modes():
    from sporch.runtime.attention.utils import _fused_merge_, merge_, resolve_merge

    assert resolve_merge("auto", "cpu") is merge_ and resolve_merge("eager", "cuda") is merge_
    assert resolve_merge("auto", "cuda") is _fused_merge_ and resolve_merge("fused", "cpu") is _fused_merge_
    with pytest.raises(ValueError, match="unknown merge mode"):
        resolve_merge("triton", "cpu")


@pytest.mark.slow
def test_fused_merge_equals_eager_merge():
    """torch.compile'd merge (Inductor, C++ on CPU) against the eager one on the same blocks:
    float32 accumulators agree to float32 rounding, bf16 blocks included."""
    from sporch.runtime.attention.utils import _fused_merge_, merge_

    for dtype in (torch.bfloat16, torch.float32):
        blocks, ro, _ = _blocks(dtype)
        res = []
        for fn in (merge_, _fused_merge_):
            out = lse = None
            for bo, bl in blocks:
                out, lse = merge_block(out, lse, bo.clone(), bl.clone(), fn)
            res.append((out, lse))
        (eo, el), (fo, fl) = res
        assert (eo - fo).abs().max() <= 4e-7 * ro.abs().max(), dtype
        assert (el - fl).abs().max() <= 4e-7 * el.abs().max(), dtype
    from sporch.runtime.attention import utils

    assert utils._fused_broken is None, utils._fused_broken  # it compiled; no silent eager fallback


def test_local_attention_is_sdpa_with_gqa():
    from sporch.runtime.attention.kernels import local_attention

    g = torch.Generator().manual_seed(5)
    q = torch.randn(2, 19, 6, 16, generator=g)
    k, v = torch.randn(2, 19, 2, 16, generator=g), torch.randn(2, 19, 2, 16, generator=g)
    ke, ve = (t.repeat_interleave(3, dim=2) for t in (k, v))
    ro, _ = _ref(q.transpose(1, 2), ke.transpose(1, 2), ve.transpose(1, 2))
    for backend in available_backends("cpu", torch.float32):
        out = local_attention(q, k, v, backend=backend)
        assert out.shape == q.shape and out.dtype == q.dtype
        assert (out.double() - ro.transpose(1, 2)).abs().max() < 2e-6, backend
