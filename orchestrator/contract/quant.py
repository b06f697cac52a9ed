"""Low-bit DiT weights (``model.quant``, docs/performance.md "Low-bit weights"): which GPUs run
float8, and how many bytes a quantised model's parameters take (stdlib only; the planner and the
runtime's bench both use it)."""

from __future__ import annotations

import re

from sporch.orchestrator.contract.vocab import FP8_QUANT, QUANT_MODES, QUANT_WEIGHT_BYTES

#: GPU model names (a cluster's ``gpu.model``) of compute capability 8.9 or later: Ada (L4, L40,
#: L40S, RTX 40xx), Hopper (H100, H200, H20, H800, GH200), Blackwell (B100, B200, GB200, RTX 50xx).
FP8_GPUS = re.compile(r"(^|[^a-z0-9])(l4|l40s?|rtx ?(40|50)\d\d|h100|h200|h20|h800|gh200|b100|b200|gb200)([^a-z0-9]|$)",
                      re.IGNORECASE)
#: GPU model names known to lack float8 (and the CPU stand-ins of local.yaml and the loopback lab).
NO_FP8 = re.compile(r"(^|[^a-z0-9])(cpu|fake|a100|a10g?|a30|a40|v100|t4|p100)([^a-z0-9]|$)", re.IGNORECASE)


def fp8_capable(gpu_model: str) -> bool:
    """Whether a GPU of this model name runs float8 matmuls; an unknown name is allowed (the
    runtime checks the device's compute capability before quantising)."""
    name = str(gpu_model or "")
    if FP8_GPUS.search(name):
        return True
    return not NO_FP8.search(name)


def uses_fp8(quant: str) -> bool:
    return quant in FP8_QUANT


def block_weight_bytes(quant: str, dtype_bytes: int) -> float:
    """Bytes per element of a block's linear weight: the workload dtype's, or the quantised
    element's (one byte; the per-output-row scales are counted by :func:`scale_bytes`)."""
    if quant not in QUANT_MODES:
        raise ValueError(f"model.quant must be one of {', '.join(QUANT_MODES)}, got {quant!r}")
    return float(QUANT_WEIGHT_BYTES.get(quant, dtype_bytes))


#: bytes per output row of a quantised weight: torchao 0.18 keeps a float32 scale and an int8 zero point
SCALE_BYTES = 5


#: How much faster the blocks' matmuls run per mode, for the cost model: none counted. A float8 x
#: float8 matmul has twice the dense bf16 peak on Ada/Hopper/Blackwell tensor cores, but on an H100
#: every mode made Wan2.1-1.3B's eager step slower, not faster (bf16 738 ms; int8_weight 825,
#: fp8_weight 806, fp8_dynamic 913: docs/performance.md, "Speed levers on an H100"): the
#: weight-only modes dequantise in every matmul and fp8_dynamic scales the activations in kernels
#: of their own. The compiled rows are not measured, so no speed-up is claimed for them either.
GEMM_SPEEDUP: dict[str, float] = {}


def gemm_speedup(quant: str) -> float:
    return GEMM_SPEEDUP.get(quant or "none", 1.0)
