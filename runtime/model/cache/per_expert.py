"""One step cache per transformer of a denoising run: a two-expert model (Wan2.2 A14B) starts
a fresh cache at the switch to its low-noise expert, so that expert's first step is computed
(a residual of the other expert's blocks is never reused), as a cache hook per transformer
does in diffusers."""

from __future__ import annotations

from typing import Any

from .decision import StepCache
from .factory import make_step_cache


class StepCaches:
    """``for_step(i, expert)``: the cache of ``expert`` for step ``i`` (None: no caching)."""

    def __init__(self, section: Any, num_steps: int, preset: str | None = None) -> None:
        self.section, self.num_steps, self.preset = section, num_steps, preset
        self.on = make_step_cache(section, num_steps, preset) is not None
        self.caches: dict[int, StepCache] = {}

    def for_step(self, step: int, expert: int = 0) -> StepCache | None:
        if not self.on:
            return None
        cache = self.caches.get(expert)
        if cache is None:
            cache = self.caches[expert] = make_step_cache(self.section, self.num_steps, self.preset)
        cache.start_step(step)
        return cache

    def record(self) -> dict:
        caches = list(self.caches.values())
        return {"method": caches[0].method if caches else None,
                "computed": sorted(s for c in caches for s in c.computed),
                "skipped": sorted(s for c in caches for s in c.skipped),
                "changes": [m for c in caches for m in c.record()["changes"]]}  # the experts run in turn
