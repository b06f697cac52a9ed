"""Checks of a job's ``workload.cache`` (step caching, docs/performance.md): the keys each method
needs and the ones it does not use."""

from __future__ import annotations

import math

from sporch.orchestrator.config.job_spec import WorkloadSpec
from sporch.orchestrator.contract.vocab import CACHE_METHODS


def validate_cache(w: WorkloadSpec, bad) -> None:
    c = w.cache
    if c.method not in CACHE_METHODS:
        raise bad("workload.cache.method", f"must be one of {', '.join(CACHE_METHODS)}, got {c.method!r}")
    if c.method == "none":
        return
    if w.kind not in ("generate", "inference"):
        raise bad("workload.cache", f"skips denoising steps, which {w.kind} does not run: use workload.kind "
                  "generate or inference, or workload.cache.method=none")
    if c.method == "taylorseer":
        if c.interval is None or isinstance(c.interval, bool) or c.interval < 2:
            raise bad("workload.cache.interval", f"taylorseer computes the blocks every interval-th step: give an "
                      f"integer >= 2 (e.g. 3), got {c.interval!r}")
        if c.order not in (1, 2):
            raise bad("workload.cache.order", f"must be 1 or 2 (the Taylor expansion's order), got {c.order!r}")
        if c.threshold is not None:
            raise bad("workload.cache.threshold", "is not used by taylorseer (its schedule is workload.cache.interval); "
                      "remove it")
    else:
        for key in ("interval", "ratios") if c.method != "magcache" else ("interval",):
            if getattr(c, key) is not None:
                raise bad(f"workload.cache.{key}", f"is not used by {c.method}; remove it")
    if c.method == "magcache" and c.ratios is not None:
        if not c.ratios or not all(isinstance(r, (int, float)) and not isinstance(r, bool) and math.isfinite(r)
                                   and r > 0 for r in c.ratios):
            raise bad("workload.cache.ratios", "must be a list of positive numbers, one per step (a magcache run's "
                      "result.json step_cache.changes)")
    if c.threshold is None and c.method != "taylorseer":
        raise bad("workload.cache.threshold", f"is required with method {c.method}: the relative change below which "
                  "a step is skipped (e.g. 0.1)")
    if c.threshold is not None and c.threshold < 0:
        raise bad("workload.cache.threshold", f"must be >= 0 (0: never skip), got {c.threshold}")
    if c.warmup_steps < 0:
        raise bad("workload.cache.warmup_steps", f"must be >= 0, got {c.warmup_steps}")
    if c.max_consecutive < 0:
        raise bad("workload.cache.max_consecutive", f"must be >= 0 (0: no cap), got {c.max_consecutive}")
