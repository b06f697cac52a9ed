"""Regional compilation: every transformer block of a diffusers model through ``torch.compile``.

Each block of the model's ``*blocks`` module lists is compiled in place (``Module.compile``,
static shapes: ``dynamic=False``; parameter names and the state dict are unchanged). The routed
attention (``SequenceParallel.attention``, where the scoped ``TorchFunctionMode`` sends each
``scaled_dot_product_attention``: USP's all-to-alls, the ring, the chunk-length all-gather) is
``torch.compiler.disable``'d, so Dynamo splits the block at it (graph before, eager attention,
graph after) and the selected kernel and the collectives run as they do eagerly; the hooks that
split a block's inputs (Wan's ``blocks.0``) and enter the mode are traced with the block. What
is fused is the glue around attention: modulation, gating, norms, RoPE application, casts.

Compiling happens on a block's first call (Dynamo traces, Inductor generates kernels); time
that call with :func:`time_first_call` and report it apart from the steady step time
(:meth:`CompileInfo.record`). Job option: ``workload.compile`` (true / false / unset = on
for CUDA, off on CPU, where compiling takes longer than the tiny runs it would speed up).
"""

from __future__ import annotations

import time
from dataclasses import asdict, dataclass
from typing import Any, Callable

from torch import nn

from sporch.runtime.models.blocks import block_lists

__all__ = ["CompileInfo", "block_lists", "compile_blocks", "time_first_call"]


@dataclass
class CompileInfo:
    """What :func:`compile_blocks` did, for result.json."""

    enabled: bool
    blocks: int = 0
    backend: str | None = None
    mode: str | None = None
    reason: str = ""  # why it is off
    first_call_s: float | None = None  # wall time of the first (compiling) call

    def record(self, step_s: float | None = None) -> dict[str, Any]:
        """Plain dict; with the steady step time, ``compile_s`` = first call - one step."""
        d = asdict(self)
        if self.first_call_s is not None and step_s is not None:
            d["compile_s"] = max(0.0, self.first_call_s - step_s)
        return d


def compile_blocks(model: nn.Module, *, enabled: bool = True, backend: str = "inductor",
                   mode: str | None = None) -> CompileInfo:
    """Compile each block of ``model`` in place (see the module docstring). ``mode``: a
    ``torch.compile`` mode, e.g. ``"max-autotune-no-cudagraphs"``; CUDA graphs
    (``"reduce-overhead"``) only pay where a region is launch-bound, and every attention call
    ends a region. Calling it twice compiles nothing more."""
    if not enabled:
        return CompileInfo(enabled=False, reason="off (workload.compile)")
    lists = block_lists(model)
    if not lists:
        return CompileInfo(enabled=False, reason=f"{type(model).__name__} has no '*blocks' module list")
    count = 0
    for _, blocks in lists:
        for block in blocks:
            if not getattr(block, "_sporch_compiled", False):
                block.compile(dynamic=False, backend=backend, mode=mode)
                block._sporch_compiled = True
            count += 1
    return CompileInfo(enabled=True, blocks=count, backend=backend, mode=mode)


def time_first_call(info: CompileInfo, step: Callable[[], Any], sync: Callable[[], None] = lambda: None) -> Any:
    """Run ``step`` once, synchronised, recording its wall time in ``info.first_call_s``
    (compilation happens here when ``info.enabled``). Returns what ``step`` returns."""
    sync()
    start = time.perf_counter()
    out = step()
    sync()
    info.first_call_s = time.perf_counter() - start
    return out
