"""Attention kernels that return the log-sum-exp, behind one calling convention.

Every kernel takes ``q [B, H, Sq, D]``, ``k, v [B, H, Sk, D]`` (same heads: callers expand
GQA first), ``scale`` and ``causal`` (top-left aligned: query ``i`` sees keys ``j <= i``)
and returns ``(out [B, H, Sq, Dv], lse [B, H, Sq] float32)``; ``out`` is in the kernel's
compute dtype (the input dtype, or float32 for ``math``).

Kernels (when each is usable, and the preference per GPU architecture, live in
``sporch.runtime.attention.select``; ``available_backends(device, dtype)`` lists the usable ones
here, preferred first):

* ``cudnn``       - ``aten._scaled_dot_product_cudnn_attention`` (CUDA sm80+, fp16/bf16, cuDNN 9).
* ``flash_attn3`` - ``flash_attn_interface.flash_attn_func`` (flash-attn 3, Hopper), when importable.
* ``flash_attn``  - ``flash_attn.flash_attn_func`` (flash-attn 2, CUDA sm80+), when importable.
* ``cuda_flash``  - ``aten._scaled_dot_product_flash_attention`` (CUDA sm80+, fp16/bf16).
* ``cuda_efficient`` - ``aten._scaled_dot_product_efficient_attention`` (CUDA, fp32 too).
* ``cpu_flash``   - ``aten._scaled_dot_product_flash_attention_for_cpu`` (CPU).
* ``math``        - plain reference: softmax(q k^T * scale) v in float32 (float64 for
  float64 inputs). Always available.
* ``sage``        - ``sageattention.sageattn`` (SageAttention, CUDA sm80+, fp16/bf16; lossy: 8-bit
  Q K^T), when importable; returns no log-sum-exp (``lse`` None): only where one block is merged.
  Never picked by ``auto``; named by ``workload.attention_precision: lossy``
  (``select.choose_for_precision``).

``backend="auto"`` picks the preferred usable one (``select.choose_kernel``).
"""

from __future__ import annotations

import inspect
import math
from typing import Callable

import torch

from sporch.runtime.attention.select import SPECS, probe, rank_kernels

#: kernels that are lossy (run only when named: workload.attention_precision lossy picks them)
LOSSY = frozenset(n for n, s in SPECS.items() if s.lossy)
#: kernels that return no log-sum-exp: one block per call only (no ring, no joint text blocks)
NO_LSE = frozenset(n for n, s in SPECS.items() if not s.lse)

__all__ = ["attention_block", "local_attention", "available_backends", "resolve_backend", "KERNELS"]

Kernel = Callable[..., "tuple[torch.Tensor, torch.Tensor]"]

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


def _flash_attn3(q, k, v, scale: float, causal: bool):
    import flash_attn_interface  # type: ignore[import-not-found]

    if causal and q.shape[-2] != k.shape[-2]:
        raise ValueError("flash_attn3 aligns causal masks bottom-right; the ring only calls it with Sq == Sk")
    fn = flash_attn_interface.flash_attn_func
    # releases differ: older ones always return (out, lse), newer ones only when asked
    kw = {"return_attn_probs": True} if "return_attn_probs" in inspect.signature(fn).parameters else {}
    res = fn(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2), softmax_scale=scale, causal=causal, **kw)
    if not isinstance(res, tuple) or len(res) < 2:
        raise RuntimeError("this flash_attn_interface returns no log-sum-exp; use another attention backend")
    return res[0].transpose(1, 2), res[1]


def _sage(q, k, v, scale: float, causal: bool):
    """SageAttention (lossy: int8 Q K^T): the output and no log-sum-exp (None), so only a call
    that merges one block may use it (usp_attention checks)."""
    from sageattention import sageattn  # type: ignore[import-not-found]

    out = sageattn(q, k, v, tensor_layout="HND", is_causal=causal, sm_scale=scale)
    return out, None


KERNELS: dict[str, Kernel] = {
    "sage": _sage,
    "cudnn": _cudnn,
    "flash_attn3": _flash_attn3,
    "flash_attn": _flash_attn,
    "cuda_flash": _cuda_flash,
    "cuda_efficient": _cuda_efficient,
    "cpu_flash": _cpu_flash,
    "math": _math,
}
assert set(KERNELS) == set(SPECS)


def available_backends(device: torch.device | str, dtype: torch.dtype) -> list[str]:
    """Kernels usable for ``device`` and ``dtype`` on this machine, preferred first."""
    return rank_kernels(probe(device, dtype))


def resolve_backend(name: str, device: torch.device | str, dtype: torch.dtype) -> tuple[str, Kernel]:
    """``(name, kernel)`` for ``name`` (or the preferred usable one for ``"auto"``)."""
    if name != "auto" and name not in KERNELS:
        raise ValueError(f"unknown attention backend {name!r}; known: {sorted(KERNELS)} or 'auto'")
    facts = probe(device, dtype)
    avail = rank_kernels(facts, lossy=name in LOSSY)
    if name == "auto":
        if not avail:
            raise ValueError(f"no attention kernel takes {dtype} on {facts.device}; use a floating dtype")
        name = avail[0]
    if name not in avail:
        raise ValueError(f"attention backend {name!r} is not usable for {facts.device} {dtype}; "
                         f"available: {avail}")
    return name, KERNELS[name]


def attention_block(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, *, scale: float | None = None,
                    causal: bool = False, backend: str = "auto") -> tuple[torch.Tensor, torch.Tensor]:
    """One attention block with its log-sum-exp; see the module docstring for layouts."""
    if scale is None:
        scale = 1.0 / math.sqrt(q.shape[-1])
    _, kernel = resolve_backend(backend, q.device, q.dtype)
    return kernel(q, k, v, scale, causal)


def local_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, *, backend: str = "auto",
                    scale: float | None = None) -> torch.Tensor:
    """Full non-causal attention on one process with the selected kernel, ``[B, S, H, D]``
    layout like ``usp_attention`` (``k, v`` may have fewer heads: GQA). Returns q's dtype. The
    unsharded reference uses this so it runs the same kernel as the sharded path."""
    h = q.shape[2]
    if k.shape[2] != h:
        k, v = (t.repeat_interleave(h // k.shape[2], dim=2) for t in (k, v))
    out, _ = attention_block(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2), scale=scale, backend=backend)
    return out.transpose(1, 2).to(q.dtype)
