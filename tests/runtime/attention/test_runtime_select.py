"""Attention kernel selection from facts given as data (no GPU needed)."""

from __future__ import annotations

import pytest
import torch

from sporch.runtime.attention.kernels import KERNELS, available_backends, resolve_backend
from sporch.runtime.attention.select import PREFERENCE, SPECS, Facts, choose_kernel, probe, rank_kernels, selected_kernel

ALL_OPS = frozenset(s.op for s in SPECS.values() if s.op)
CUDA_OPS = ALL_OPS - {"_scaled_dot_product_flash_attention_for_cpu"}
H100, A100, B200, V100, L40 = (9, 0), (8, 0), (10, 0), (7, 0), (8, 9)


def cuda(cap, dtype="bfloat16", modules=(), cudnn=91900, ops=CUDA_OPS):
    return Facts("cuda", dtype, capability=cap, cudnn_version=cudnn, modules=frozenset(modules), ops=ops)


def test_hopper_prefers_cudnn_then_flash_attn3():
    f = cuda(H100, modules=("flash_attn", "flash_attn_interface"))
    assert rank_kernels(f) == ["cudnn", "flash_attn3", "cuda_flash", "flash_attn", "cuda_efficient", "math"]
    assert choose_kernel(f) == "cudnn"


def test_hopper_without_cudnn_attention_falls_to_the_next():
    assert choose_kernel(cuda(H100, cudnn=None)) == "cuda_flash"
    assert choose_kernel(cuda(H100, cudnn=8902)) == "cuda_flash"  # cuDNN 8 has no SDPA kernel torch uses
    assert choose_kernel(cuda(H100, modules=("flash_attn_interface",), cudnn=None)) == "flash_attn3"
    no_cudnn_op = CUDA_OPS - {"_scaled_dot_product_cudnn_attention"}
    assert choose_kernel(cuda(H100, ops=no_cudnn_op)) == "cuda_flash"


def test_flash_attn3_is_hopper_only():
    for cap in (A100, L40, B200):
        assert "flash_attn3" not in rank_kernels(cuda(cap, modules=("flash_attn_interface",)))


def test_ampere_prefers_flash_attn_package_then_torch_flash():
    assert rank_kernels(cuda(A100, modules=("flash_attn",)))[:3] == ["flash_attn", "cuda_flash", "cudnn"]
    assert choose_kernel(cuda(L40)) == "cuda_flash"


def test_blackwell_prefers_cudnn():
    assert choose_kernel(cuda(B200, modules=("flash_attn",))) == "cudnn"


def test_pre_ampere_gpus_get_the_efficient_kernel():
    assert rank_kernels(cuda(V100, dtype="float16", modules=("flash_attn",))) == ["cuda_efficient", "math"]


def test_float32_on_cuda_skips_half_only_kernels():
    assert rank_kernels(cuda(H100, dtype="float32", modules=("flash_attn", "flash_attn_interface"))) == [
        "cuda_efficient", "math"]
    assert rank_kernels(cuda(H100, dtype="float64")) == ["math"]


def test_cpu_order_and_non_float_dtypes():
    assert rank_kernels(Facts("cpu", "bfloat16", ops=ALL_OPS)) == ["cpu_flash", "math"]
    assert rank_kernels(Facts("cpu", "float32")) == ["math"]  # a torch without the CPU flash op
    with pytest.raises(ValueError, match="no attention kernel takes int64"):
        choose_kernel(Facts("cpu", "int64", ops=ALL_OPS))


def test_every_preference_row_names_known_kernels_and_ends_with_math():
    for family, row in PREFERENCE.items():
        assert set(row) <= set(SPECS) == set(KERNELS), family
        assert row[-1] == "math" and len(set(row)) == len(row), family


def test_probe_on_this_machine_matches_the_rule():
    facts = probe("cpu", "bf16")
    assert facts.device == "cpu" and facts.dtype == "bfloat16" and facts.capability is None
    assert available_backends("cpu", torch.bfloat16) == rank_kernels(facts)
    assert selected_kernel("cpu", "float32") == resolve_backend("auto", "cpu", torch.float32)[0] == "cpu_flash"


def test_resolve_backend_refuses_kernels_not_usable_here():
    with pytest.raises(ValueError, match="'cudnn' is not usable for cpu"):
        resolve_backend("cudnn", "cpu", torch.bfloat16)
    with pytest.raises(ValueError, match="unknown attention backend"):
        resolve_backend("flash4", "cpu", torch.bfloat16)
