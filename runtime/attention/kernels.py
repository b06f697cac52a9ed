"""Attention kernels that return the log-sum-exp, behind one calling convention.

Every kernel takes ``q [B, H, Sq, D]``, ``k, v [B, H, Sk, D]`` (same heads: callers expand
GQA first), ``scale`` and ``causal`` (top-left aligned: query ``i`` sees keys ``j <= i``)
and returns ``(out [B, H, Sq, Dv], lse [B, H, Sq] float32)``; ``out`` is in the kernel's
compute dtype (the input dtype, or float32 for ``math``).

Backends (``available_backends(device, dtype)`` lists those usable here, fastest first):

* ``flash_attn``  - ``flash_attn.flash_attn_func`` (CUDA, fp16/bf16), when importable.
* ``cuda_flash``  - ``aten._scaled_dot_product_flash_attention`` (CUDA, fp16/bf16).
* ``cuda_efficient`` - ``aten._scaled_dot_product_efficient_attention`` (CUDA, fp32 too).
* ``cudnn``       - ``aten._scaled_dot_product_cudnn_attention`` (CUDA; explicit only).
* ``cpu_flash``   - ``aten._scaled_dot_product_flash_attention_for_cpu`` (CPU).
* ``math``        - plain reference: softmax(q k^T * scale) v in float32 (float64 for
  float64 inputs). Always available.

``backend="auto"`` picks the first available one.
"""

from __future__ import annotations

import math
from typing import Callable

import torch

__all__ = ["attention_block", "available_backends", "resolve_backend", "BACKENDS"]

Kernel = Callable[..., "tuple[torch.Tensor, torch.Tensor]"]

_HALF = (torch.float16, torch.bfloat16)


def _math(q, k, v, scale: float, causal: bool):
    ct = torch.float64 if q.dtype == torch.float64 else torch.float32
    s = torch.matmul(q.to(ct), k.to(ct).transpose(-1, -2)) * scale
    if causal:
        sq, sk = s.shape[-2], s.shape[-1]
        mask = torch.ones(sq, sk, dtype=torch.bool, device=s.device).tril()
        s = s.masked_fill(~mask, float("-inf"))
    lse = torch.logsumexp(s, dim=-1)
    p = torch.exp(s - lse.unsqueeze(-1))
    out = torch.matmul(p, v.to(ct))
    return out, lse.to(torch.float32) if ct == torch.float32 else lse


def _cpu_flash(q, k, v, scale: float, causal: bool):
    out, lse = torch.ops.aten._scaled_dot_product_flash_attention_for_cpu(
        q, k, v, 0.0, causal, attn_mask=None, scale=scale)
    return out, lse


def _cuda_flash(q, k, v, scale: float, causal: bool):
    res = torch.ops.aten._scaled_dot_product_flash_attention(q, k, v, 0.0, causal, False, scale=scale)
    return res[0], res[1]


def _cuda_efficient(q, k, v, scale: float, causal: bool):
    res = torch.ops.aten._scaled_dot_product_efficient_attention(q, k, v, None, True, 0.0, causal, scale=scale)
    sq = q.shape[-2]
    return res[0], res[1][..., :sq]  # the lse may be padded along the sequence


def _cudnn(q, k, v, scale: float, causal: bool):
    res = torch.ops.aten._scaled_dot_product_cudnn_attention(q, k, v, None, True, 0.0, causal, False, scale=scale)
    b, h, sq = q.shape[0], q.shape[1], q.shape[2]
    return res[0], res[1].reshape(b, h, -1)[..., :sq]


def _flash_attn(q, k, v, scale: float, causal: bool):
    from flash_attn import flash_attn_func  # type: ignore[import-not-found]

    if causal and q.shape[-2] != k.shape[-2]:
        raise ValueError("flash_attn aligns causal masks bottom-right; the ring only calls it with Sq == Sk")
    out, lse, _ = flash_attn_func(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2), dropout_p=0.0,
                                  softmax_scale=scale, causal=causal, return_attn_probs=True)
    return out.transpose(1, 2), lse


def _has_flash_attn() -> bool:
    try:
        import flash_attn  # type: ignore[import-not-found]  # noqa: F401
    except Exception:  # noqa: BLE001 - a broken install counts as absent
        return False
    return True


def _has_op(name: str) -> bool:
    return hasattr(torch.ops.aten, name)


# name -> (kernel, usable(device_type, dtype))
BACKENDS: dict[str, tuple[Kernel, Callable[[str, torch.dtype], bool]]] = {
    "flash_attn": (_flash_attn, lambda dev, dt: dev == "cuda" and dt in _HALF and _has_flash_attn()),
    "cuda_flash": (_cuda_flash, lambda dev, dt: dev == "cuda" and dt in _HALF
                   and _has_op("_scaled_dot_product_flash_attention")),
    "cuda_efficient": (_cuda_efficient, lambda dev, dt: dev == "cuda" and dt in _HALF + (torch.float32,)
                       and _has_op("_scaled_dot_product_efficient_attention")),
    "cudnn": (_cudnn, lambda dev, dt: dev == "cuda" and dt in _HALF
              and _has_op("_scaled_dot_product_cudnn_attention")),
    "cpu_flash": (_cpu_flash, lambda dev, dt: dev == "cpu" and dt in _HALF + (torch.float32, torch.float64)
                  and _has_op("_scaled_dot_product_flash_attention_for_cpu")),
    "math": (_math, lambda dev, dt: dt.is_floating_point),
}

_AUTO_ORDER = ("flash_attn", "cuda_flash", "cuda_efficient", "cpu_flash", "math")


def available_backends(device: torch.device | str, dtype: torch.dtype) -> list[str]:
    dev = torch.device(device).type
    return [name for name in _AUTO_ORDER if BACKENDS[name][1](dev, dtype)]


def resolve_backend(name: str, device: torch.device | str, dtype: torch.dtype) -> tuple[str, Kernel]:
    """``(name, kernel)`` for ``name`` (or the fastest available for ``"auto"``)."""
    dev = torch.device(device).type
    if name == "auto":
        avail = available_backends(device, dtype)
        name = avail[0]
    if name not in BACKENDS:
        raise ValueError(f"unknown attention backend {name!r}; known: {sorted(BACKENDS)} or 'auto'")
    kernel, usable = BACKENDS[name]
    if not usable(dev, dtype):
        raise ValueError(f"attention backend {name!r} is not usable for {dev} {dtype}; "
                         f"available: {available_backends(device, dtype)}")
    return name, kernel


def attention_block(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, *, scale: float | None = None,
                    causal: bool = False, backend: str = "auto") -> tuple[torch.Tensor, torch.Tensor]:
    """One attention block with its log-sum-exp; see the module docstring for layouts."""
    if scale is None:
        scale = 1.0 / math.sqrt(q.shape[-1])
    _, kernel = resolve_backend(backend, q.device, q.dtype)
    return kernel(q, k, v, scale, causal)
