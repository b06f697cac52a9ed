"""``workload.attention_precision`` (issue 36): SageAttention is a kernel choice that ``auto``
never takes; ``lossy`` takes it where it runs and one block is merged per call, else the exact
kernel, saying why (no sageattention on this CPU: the exact kernel, stated)."""

from __future__ import annotations

import pytest
import torch

from sporch.runtime.attention.select import Facts, choose_for_precision, choose_kernel, rank_kernels, run_choice
from sporch.runtime.attention.utils import merge_block

HOPPER_OPS = frozenset({"_scaled_dot_product_cudnn_attention", "_scaled_dot_product_flash_attention",
                        "_scaled_dot_product_efficient_attention"})


def hopper(*modules: str, dtype: str = "bfloat16") -> Facts:
    return Facts("cuda", dtype, capability=(9, 0), cudnn_version=91900, modules=frozenset(modules), ops=HOPPER_OPS)


def test_auto_and_exact_never_take_sage():
    f = hopper("sageattention")
    assert "sage" not in rank_kernels(f) and choose_kernel(f) == "cudnn"
    assert choose_for_precision(f, "exact").kernel == "cudnn"
    assert rank_kernels(f, lossy=True)[0] == "sage"


def test_lossy_takes_sage_where_one_block_is_merged():
    c = choose_for_precision(hopper("sageattention"), "lossy", blocks=1)
    assert c.kernel == "sage" and "lossy" in c.reason


def test_lossy_with_a_ring_or_joint_blocks_falls_back_and_says_why():
    c = choose_for_precision(hopper("sageattention"), "lossy", blocks=2)
    assert c.kernel == "cudnn" and "returns no log-sum-exp" in c.reason


@pytest.mark.parametrize("facts,why", [
    (hopper(), "sage needs the sageattention package"),
    (hopper("sageattention", dtype="float32"), "sage needs float16/bfloat16, not float32"),
    (Facts("cuda", "bfloat16", capability=(7, 5), modules=frozenset({"sageattention"}),
           ops=frozenset({"_scaled_dot_product_efficient_attention"})), "sage needs compute capability 8.0+"),
])
def test_lossy_without_a_usable_lossy_kernel_is_the_exact_one(facts, why):
    c = choose_for_precision(facts, "lossy")
    assert c.kernel == choose_kernel(facts) and why in c.reason, c


def test_on_this_cpu_lossy_runs_the_exact_kernel_and_says_so():
    c = run_choice("lossy", "cpu", torch.float32)
    assert c.kernel == choose_kernel(Facts("cpu", "float32", ops=frozenset(
        {"_scaled_dot_product_flash_attention_for_cpu"}))) or c.kernel == "math"
    assert c.reason.startswith("lossy asked, but no lossy kernel runs here (sage needs cuda, this is cpu)")
    assert run_choice("exact", "cpu", torch.float32).kernel == c.kernel


def test_unknown_precision_is_refused():
    with pytest.raises(ValueError, match="exact or lossy"):
        choose_for_precision(hopper(), "fast")


def test_a_kernel_without_lse_merges_as_a_single_block():
    out, lse = merge_block(None, None, torch.ones(1, 1, 2, 3, dtype=torch.bfloat16), None)
    assert out.dtype == torch.float32 and lse is None
