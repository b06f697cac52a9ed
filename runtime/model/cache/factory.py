"""The step cache a Plan's ``workload.cache`` section asks for."""

from __future__ import annotations

from typing import Any

from sporch.orchestrator.contract.vocab import CACHE_METHODS

from .decision import StepCache, StepPolicy
from .fbcache import FirstBlockCache
from .magcache import MagCache, published_ratios, step_ratios
from .taylorseer import TaylorSeerCache
from .teacache import TeaCache, rescale_coefficients

METHODS = CACHE_METHODS


def make_step_cache(cache: Any, num_steps: int, preset: str | None = None) -> StepCache | None:
    """The step cache a Plan's ``workload.cache`` section (or a dict of the same keys) asks for,
    fresh for one denoising run of ``num_steps`` steps; None for method none."""
    if cache is None:
        return None
    get = cache.get if isinstance(cache, dict) else (lambda k, d=None: getattr(cache, k, d))
    method = get("method", "none") or "none"
    if method == "none":
        return None
    policy = StepPolicy(num_steps=num_steps, threshold=float(get("threshold") or 0.0),
                        warmup_steps=int(get("warmup_steps", 1)), max_consecutive=int(get("max_consecutive", 0)))
    if method == "fbcache":
        return FirstBlockCache(policy)
    if method == "teacache":
        return TeaCache(policy, rescale_coefficients(preset))
    if method == "taylorseer":
        return TaylorSeerCache(policy, interval=int(get("interval", 0) or 0), order=int(get("order", 1) or 1))
    if method == "magcache":
        ratios = get("ratios") or published_ratios(preset)
        return MagCache(policy, ratios=step_ratios(ratios, num_steps) if ratios else None)
    raise ValueError(f"unknown step cache method {method!r}; use one of {', '.join(METHODS)}")
