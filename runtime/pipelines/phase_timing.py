"""Per-phase figures of a generate run: seconds and peak memory of text encoding, loading the
transformer, denoising, decoding and saving (``result.json``'s ``metrics.stages``, a key kept as
it was for the reports and older result files; docs/generate.md). "Stage" in sporch means weight
staging (``model.stage``, runtime/stage.py).

On a GPU each phase's peak is the most memory allocated while it ran (the peak counter is reset
when a phase starts); on the CPU it is the process's peak resident set when the phase ended
(which only grows). A phase entered several times (one denoising per prompt batch) adds up.
"""

from __future__ import annotations

import contextlib
import os
import time
from typing import Any, Iterator, Optional

import torch

from sporch.runtime.measure import peak_memory_bytes, sync


class PhaseTimer:
    def __init__(self, device: torch.device) -> None:
        self.device = device
        self.seen: dict[str, dict[str, Any]] = {}

    @contextlib.contextmanager
    def __call__(self, name: str) -> Iterator[None]:
        sync(self.device)
        if self.device.type == "cuda":
            torch.cuda.reset_peak_memory_stats(self.device)
        start = time.perf_counter()
        try:
            yield
        finally:
            sync(self.device)
            rec = self.seen.setdefault(name, {"s": 0.0, "peak_memory_bytes": 0})
            rec["s"] += time.perf_counter() - start
            rec["peak_memory_bytes"] = max(rec["peak_memory_bytes"], peak_memory_bytes(self.device))

    def add(self, name: str, seconds: float) -> None:
        """Add ``seconds`` to stage ``name``, timed by the caller (a stage inside a call sporch does
        not split, e.g. a diffusers pipeline's decode after its last step); its peak is now's."""
        rec = self.seen.setdefault(name, {"s": 0.0, "peak_memory_bytes": 0})
        rec["s"] += seconds
        rec["peak_memory_bytes"] = max(rec["peak_memory_bytes"], peak_memory_bytes(self.device))

    def seconds(self, name: str) -> float:
        return float(self.seen.get(name, {}).get("s", 0.0))

    def record(self, steps: int = 0) -> dict[str, Any]:
        """``{phase: {s, peak_memory_bytes}}``; denoise adds ``steps`` and ``s_per_step``."""
        out = {k: {"s": round(v["s"], 6), "peak_memory_bytes": int(v["peak_memory_bytes"])}
               for k, v in self.seen.items()}
        if "denoise" in out and steps:
            out["denoise"].update(steps=steps, s_per_step=round(out["denoise"]["s"] / steps, 6))
        return out


def process_start_time() -> Optional[float]:
    """When this process started (seconds since the epoch), from Linux's /proc (the process's
    start in clock ticks since boot + the boot time); None elsewhere. What ``metrics.stages.startup``
    counts from: the process start, the imports and the process group's set-up before the job's
    first phase."""
    try:
        with open("/proc/self/stat", encoding="ascii") as fh:
            ticks = int(fh.read().rsplit(")", 1)[1].split()[19])  # field 22: starttime
        with open("/proc/stat", encoding="ascii") as fh:
            boot = next(int(line.split()[1]) for line in fh if line.startswith("btime "))
        return boot + ticks / os.sysconf("SC_CLK_TCK")
    except (OSError, ValueError, IndexError, StopIteration):
        return None
