"""Helpers shared by the runtime tests (imported by the spawned ranks too)."""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F


def reference_attention(q, k, v, seq_len, joint_q=None, joint_k=None, joint_v=None, causal=False,
                        dtype=torch.float64):
    """Full attention on gathered [B, S, H, D] tensors (padding cut at seq_len), GQA expanded,
    text keys/values appended, text queries appended; returns (image_out, text_out)."""
    q, k, v = q[:, :seq_len].to(dtype), k[:, :seq_len].to(dtype), v[:, :seq_len].to(dtype)
    H, Hkv = q.shape[2], k.shape[2]
    if joint_k is not None:
        k = torch.cat([k, joint_k.to(dtype)], 1)
        v = torch.cat([v, joint_v.to(dtype)], 1)
    S = q.shape[1]
    if joint_q is not None:
        q = torch.cat([q, joint_q.to(dtype)], 1)
    k = k.repeat_interleave(H // Hkv, 2)
    v = v.repeat_interleave(H // Hkv, 2)
    s = torch.einsum("bqhd,bkhd->bhqk", q, k) / math.sqrt(q.shape[-1])
    if causal:
        s = s.masked_fill(~torch.ones(s.shape[-2], s.shape[-1], dtype=torch.bool).tril(), float("-inf"))
    o = torch.einsum("bhqk,bkhd->bqhd", torch.softmax(s, -1), v)
    return o[:, :S], o[:, S:]


def sdpa_single(q, k, v, seq_len, joint_q=None, joint_k=None, joint_v=None, causal=False):
    """Single-process torch SDPA in the inputs' dtype on the same problem (the baseline error)."""
    q, k, v = q[:, :seq_len], k[:, :seq_len], v[:, :seq_len]
    H, Hkv = q.shape[2], k.shape[2]
    if joint_k is not None:
        k = torch.cat([k, joint_k], 1)
        v = torch.cat([v, joint_v], 1)
    S = q.shape[1]
    if joint_q is not None:
        q = torch.cat([q, joint_q], 1)
    k = k.repeat_interleave(H // Hkv, 2)
    v = v.repeat_interleave(H // Hkv, 2)
    o = F.scaled_dot_product_attention(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2),
                                       is_causal=causal).transpose(1, 2)
    return o[:, :S], o[:, S:]
