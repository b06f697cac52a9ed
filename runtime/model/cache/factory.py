"""The step cache a Plan's ``workload.cache`` section asks for."""

from __future__ import annotations

from sporch.orchestrator.contract.sections import CacheSection
from sporch.orchestrator.contract.vocab import CACHE_METHODS

from .decision import StepCache, StepPolicy
from .fbcache import FirstBlockCache
from .magcache import MagCache, published_ratios, step_ratios
from .taylorseer import TaylorSeerCache
from .teacache import TeaCache, rescale_coefficients

METHODS = CACHE_METHODS


def make_step_cache(cache: CacheSection | dict | None, num_steps: int, preset: str | None = None) -> StepCache | None:
    """The step cache a Plan's ``workload.cache`` section (or a dict of its keys; the keys left out
    take the section's defaults) asks for, fresh for one denoising run of ``num_steps`` steps;
    None for method none."""
    if cache is None:
        return None
    section = CacheSection.from_dict(cache) if isinstance(cache, dict) else cache
    method = section.method or "none"
    if method == "none":
        return None
    policy = StepPolicy(num_steps=num_steps, threshold=float(section.threshold or 0.0),
                        warmup_steps=int(section.warmup_steps), max_consecutive=int(section.max_consecutive))
    if method == "fbcache":
        return FirstBlockCache(policy)
    if method == "teacache":
        return TeaCache(policy, rescale_coefficients(preset))
    if method == "taylorseer":
        return TaylorSeerCache(policy, interval=int(section.interval or 0), order=int(section.order or 1))
    if method == "magcache":
        ratios = section.ratios or published_ratios(preset)
        return MagCache(policy, ratios=step_ratios(ratios, num_steps) if ratios else None)
    raise ValueError(f"unknown step cache method {method!r}; use one of {', '.join(METHODS)}")
