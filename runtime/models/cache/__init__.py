"""Step caches on any family's class, built on diffusers' hooks (docs/performance.md, "Step
caching"): :mod:`.apply` (``apply_step_cache``: the method a plan names on the model's blocks),
:mod:`.first_block` (diffusers' First Block Cache with its decision agreed), :mod:`.stack` (the
head and tail hooks that skip the whole block stack: TeaCache, MagCache, TaylorSeer),
:mod:`.rules` (their decisions), :mod:`.probe` (TeaCache's probes), :mod:`.record` (each
context's steps and the metrics' ``step_cache``), :mod:`.decision` (the sums a skip decision is
taken from, reduced over the replica, and the step policy) and :mod:`.agreement` (every rank of
a replica skipped the same steps, checked)."""
