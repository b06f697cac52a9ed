"""Step caching: skip the transformer blocks on steps whose input barely changed, the skip
decision taken once per step for the whole sequence (docs/performance.md, "Step caching").

* :mod:`.decision`: the shared part: the relative L1 change reduced over the sequence and CFG
  groups (padding excluded), the step policy (warm-up, last step, max consecutive skips) and
  the record of computed and skipped steps.
* :mod:`.fbcache`: first-block cache. :mod:`.teacache`: TeaCache with the published rescale
  polynomials. :mod:`.taylorseer`: TaylorSeer (diffusers' Taylor expansion of the stack's
  residual). :mod:`.magcache`: MagCache (diffusers' magnitude-ratio accumulation).

A model's ``forward_tokens(..., step_cache=...)`` is the seam: ``step_cache.bind(valid, ctx)``
gives the object the model's ``_forward`` hands its first block and its remaining blocks to.
"""

from __future__ import annotations

from .decision import StepCache, StepPolicy
from .factory import METHODS, make_step_cache
from .fbcache import FirstBlockCache
from .per_expert import StepCaches
from .magcache import MagCache
from .taylorseer import TaylorSeerCache
from .teacache import TeaCache, rescale_coefficients

__all__ = ["METHODS", "StepCache", "StepPolicy", "FirstBlockCache", "TeaCache", "make_step_cache", "MagCache", "TaylorSeerCache",
           "rescale_coefficients", "StepCaches"]

