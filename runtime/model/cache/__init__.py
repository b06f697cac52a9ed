"""What every step cache shares (docs/performance.md, "Step caching"): :mod:`.decision` (the
sums a skip decision is taken from, reduced over the replica, and the step policy) and
:mod:`.agreement` (every rank of a replica skipped the same steps, checked)."""
