"""Step caching: skip the transformer blocks on steps whose input barely changed, the skip
decision taken once per step for the whole sequence (docs/performance.md, "Step caching").

* :mod:`.decision`: the shared part: the relative L1 change reduced over the sequence and CFG
  groups (padding excluded), the step policy (warm-up, last step, max consecutive skips) and
  the record of computed and skipped steps.
* :mod:`.fbcache`: first-block cache. :mod:`.teacache`: TeaCache with the published rescale
  polynomials.

A model's ``forward_tokens(..., step_cache=...)`` is the seam: ``step_cache.bind(valid, ctx)``
gives the object the model's ``_forward`` hands its first block and its remaining blocks to.
"""

from __future__ import annotations

from typing import Any

from .decision import StepCache, StepPolicy
from .fbcache import FirstBlockCache
from .teacache import TeaCache, rescale_coefficients

METHODS = ("none", "fbcache", "teacache")


def make_step_cache(cache: Any, num_steps: int, preset: str | None = None) -> StepCache | None:
    """The step cache a Plan's ``workload.cache`` section (or a dict of the same keys) asks for,
    fresh for one denoising run of ``num_steps`` steps; None for method none."""
    if cache is None:
        return None
    get = cache.get if isinstance(cache, dict) else (lambda k, d=None: getattr(cache, k, d))
    method = get("method", "none") or "none"
    if method == "none":
        return None
    policy = StepPolicy(num_steps=num_steps, threshold=float(get("threshold")),
                        warmup_steps=int(get("warmup_steps", 1)), max_consecutive=int(get("max_consecutive", 0)))
    if method == "fbcache":
        return FirstBlockCache(policy)
    if method == "teacache":
        return TeaCache(policy, rescale_coefficients(preset))
    raise ValueError(f"unknown step cache method {method!r}; use one of {', '.join(METHODS)}")


__all__ = ["METHODS", "StepCache", "StepPolicy", "FirstBlockCache", "TeaCache", "make_step_cache",
           "rescale_coefficients"]
