"""Bytes each aten op reads and writes in one forward (a stand-in for GPU memory traffic, counted on the CPU).

:class:`ByteCounter` is a ``TorchDispatchMode``: every aten op that runs under it is recorded by
kind (``aten.mul``, ``aten._to_copy``...) with the bytes of its tensor inputs and outputs. An op
whose outputs all alias an input (view, reshape-as-view, split, expand, ``_unsafe_view``) moves
nothing and is not counted; a broadcast input (stride 0) counts its distinct elements only. Reads
of the model's parameters are kept apart (``weight_bytes``): both models read the same weights,
the difference is in the activations. ``float32_bytes``: the float32 outputs written (the float32
intermediates of a bf16 model). Used by bench/flux_bytes.py and tests/runtime/model/test_bytes_moved.py.
"""

from __future__ import annotations

import math
from collections import defaultdict
from dataclasses import dataclass

import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_leaves


@dataclass
class OpBytes:
    calls: int = 0
    #: activation bytes read + written (parameters excluded)
    bytes: int = 0
    #: float32 outputs written
    float32: int = 0


def distinct_bytes(t: torch.Tensor) -> int:
    """Bytes of the distinct elements ``t`` addresses (a broadcast dim, stride 0, counts once)."""
    n = math.prod(s for s, st in zip(t.shape, t.stride()) if st != 0) if t.dim() else 1
    return n * t.element_size()


def _storage(t: torch.Tensor) -> int:
    return t.untyped_storage().data_ptr()


class ByteCounter(TorchDispatchMode):
    """``with ByteCounter(model.parameters()) as c: model(...)``; then ``c.ops``, ``c.total``..."""

    def __init__(self, params=()) -> None:
        super().__init__()
        self._params = {_storage(p) for p in params}
        self.ops: dict[str, OpBytes] = defaultdict(OpBytes)
        self.weight_bytes = 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        ins = [t for t in tree_leaves((args, kwargs)) if isinstance(t, torch.Tensor)]
        outs = [t for t in tree_leaves(out) if isinstance(t, torch.Tensor)]
        name = str(func.overloadpacket)
        in_storages = {_storage(t) for t in ins}
        if not func._schema.is_mutable and all(_storage(t) in in_storages for t in outs):
            return out  # a view: no data moved
        if name.startswith("aten.empty") or name in ("aten.lift_fresh", "aten.detach"):
            return out
        row = self.ops[name]
        row.calls += 1
        for t in ins:
            if _storage(t) in self._params:
                self.weight_bytes += distinct_bytes(t)
            else:
                row.bytes += distinct_bytes(t)
        for t in outs:
            row.bytes += distinct_bytes(t)
            if t.dtype == torch.float32:
                row.float32 += distinct_bytes(t)
        return out

    @property
    def total(self) -> int:
        """Activation bytes read + written by every op."""
        return sum(r.bytes for r in self.ops.values())

    @property
    def float32_bytes(self) -> int:
        return sum(r.float32 for r in self.ops.values())


def count_bytes(fn, params=()) -> ByteCounter:
    """Run ``fn()`` once (no grad) under a :class:`ByteCounter`; returns the counter."""
    counter = ByteCounter(list(params))
    with torch.no_grad(), counter:
        fn()
    return counter


def table(ours: ByteCounter, theirs: ByteCounter, names=("sporch", "diffusers")) -> str:
    """Per op kind: calls and MB moved by each, sorted by the difference (largest excess first);
    then the totals, the float32 outputs written and the weight bytes read."""
    mb = 1e6
    kinds = sorted(set(ours.ops) | set(theirs.ops),
                   key=lambda k: theirs.ops.get(k, OpBytes()).bytes - ours.ops.get(k, OpBytes()).bytes)
    a, b = names
    head = f"{'op':<42} {a + ' calls':>13} {b + ' calls':>16} {a + ' MB':>10} {b + ' MB':>13} {'diff MB':>9}"
    lines = [head, "-" * len(head)]
    for k in kinds:
        x, y = ours.ops.get(k, OpBytes()), theirs.ops.get(k, OpBytes())
        lines.append(f"{k:<42} {x.calls:>13} {y.calls:>16} {x.bytes / mb:>10.2f} {y.bytes / mb:>13.2f} "
                     f"{(x.bytes - y.bytes) / mb:>+9.2f}")
    lines.append("-" * len(head))
    for label, fa, fb in (("total activation MB read+written", ours.total, theirs.total),
                          ("float32 outputs MB written", ours.float32_bytes, theirs.float32_bytes),
                          ("weights MB read", ours.weight_bytes, theirs.weight_bytes)):
        lines.append(f"{label:<42} {'':>13} {'':>16} {fa / mb:>10.2f} {fb / mb:>13.2f} {(fa - fb) / mb:>+9.2f}")
    calls_a, calls_b = (sum(r.calls for r in c.ops.values()) for c in (ours, theirs))
    lines.append(f"{'ops counted':<42} {calls_a:>13} {calls_b:>16}")
    return "\n".join(lines)


# ---------------------------------------------------------------------------------------------
# sporch's model and diffusers' on the same weights and inputs (Flux.1, Wan2.1)

@dataclass
class PairCounts:
    """One bf16 forward of each model: the byte counts and the outputs ([B, C, 1, H, W])."""

    sporch: ByteCounter
    diffusers: ByteCounter
    sporch_out: torch.Tensor
    diffusers_out: torch.Tensor
    #: diffusers in float32 on the same (bf16-rounded) weights and inputs, when asked for
    reference: torch.Tensor | None = None


def _saved_and_loaded(dm, folder, dtype):
    """``dm``'s weights rounded to ``dtype`` and saved to ``folder``; the model diffusers loads
    from there in ``dtype`` (its ``_keep_in_fp32_modules`` in float32, as a pipeline runs it)."""
    dm.to(dtype).save_pretrained(folder)
    return type(dm).from_pretrained(folder, torch_dtype=dtype).eval()


def _pair(model, ours, dm, theirs, reference) -> PairCounts:
    """One counted forward of sporch's ``model`` (``ours()``) and of diffusers' ``dm``
    (``theirs()``), then ``reference()`` (diffusers in float32) when given."""
    out = {}
    c_ours = count_bytes(lambda: out.setdefault("sporch", ours()), model.parameters())
    c_theirs = count_bytes(lambda: out.setdefault("diffusers", theirs()), dm.parameters())
    return PairCounts(c_ours, c_theirs, out["sporch"], out["diffusers"], reference() if reference else None)


def flux_counts(cfg: dict, folder, *, grid=(16, 16), text_len: int = 64, dtype=torch.bfloat16, seed: int = 0,
                guidance: float = 3.5, sigma: float = 0.7, reference: bool = False) -> PairCounts:
    """A random diffusers Flux model with config ``cfg`` (tests/runtime/model/published.py) saved
    in ``dtype`` to ``folder``, loaded from there by diffusers and by sporch; one forward of each on an
    ``grid`` (h, w) token image (latents 2h x 2w, packed 2 x 2) and ``text_len`` text tokens,
    counted by :class:`ByteCounter`. ``reference``: also diffusers' float32 output."""
    from sporch.runtime.model import build_model

    from tests.runtime.model.published import diffusers_flux, flux_reference, sporch_flux_dict

    dm = _saved_and_loaded(diffusers_flux(cfg, seed), folder, dtype)
    model = build_model(sporch_flux_dict(cfg, text_len=text_len), weights=str(folder), dtype=dtype)
    g = torch.Generator().manual_seed(seed + 1)
    h, w = grid
    x = torch.randn(1, cfg["in_channels"] // 4, 1, 2 * h, 2 * w, generator=g).to(dtype)
    text = torch.randn(1, text_len, cfg["joint_attention_dim"], generator=g).to(dtype)
    pooled = torch.randn(1, cfg["pooled_projection_dim"], generator=g).to(dtype)
    guide = guidance if cfg.get("guidance_embeds") else None

    def float32_reference():
        ref32 = type(dm).from_pretrained(folder, torch_dtype=torch.float32)
        return flux_reference(ref32, x.float(), sigma, text.float(), pooled.float(), guidance)

    return _pair(model, lambda: model(x, sigma * 1000, {"text": text, "pooled": pooled}, guidance=guide),
                 dm, lambda: flux_reference(dm, x, sigma, text, pooled, guidance),
                 float32_reference if reference else None)


def wan_counts(cfg: dict, folder, *, grid=(2, 8, 8), text_len: int = 16, dtype=torch.bfloat16, seed: int = 0,
               timestep: float = 500.0, reference: bool = False) -> PairCounts:
    """As :func:`flux_counts` for Wan2.1 (``WanTransformer3DModel``): a ``grid`` (f, h, w) token
    video (latents f x 2h x 2w) and ``text_len`` text tokens."""
    from sporch.runtime.model import build_model

    from tests.runtime.model.published import diffusers_wan, sporch_wan_dict

    dm = _saved_and_loaded(diffusers_wan(cfg, seed), folder, dtype)
    model = build_model(sporch_wan_dict(cfg, text_len=text_len), weights=str(folder), dtype=dtype)
    g = torch.Generator().manual_seed(seed + 1)
    f, h, w = grid
    x = torch.randn(1, cfg["in_channels"], f, 2 * h, 2 * w, generator=g).to(dtype)
    text = torch.randn(1, text_len, cfg["text_dim"], generator=g).to(dtype)
    t = torch.tensor([timestep])

    def float32_reference():
        with torch.no_grad():
            ref32 = type(dm).from_pretrained(folder, torch_dtype=torch.float32)
            return ref32(x.float(), t, text.float(), return_dict=False)[0]

    return _pair(model, lambda: model(x, t, text), dm, lambda: dm(x, t, text, return_dict=False)[0],
                 float32_reference if reference else None)
