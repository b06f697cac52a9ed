"""Fault-injection hooks, for tests only: each makes a rank misbehave as a real fault would.

None has any effect unless its variable is set in the ranks' environment. They are declared here
(:data:`HOOKS`, listed in docs/settings.md) and read here only, through
:func:`sporch.orchestrator.contract.settings.read`; production modules ask the question below
that concerns them:

- :func:`hang_before` (the collective watchdog): ``SPORCH_FAULT_HANG_RANK=3`` and
  ``SPORCH_FAULT_HANG_BEFORE=all_to_all`` (a collective's kind or name) make rank 3 sleep
  ``SPORCH_FAULT_HANG_S`` seconds before entering that collective: a rank that never arrives;
- :func:`slow_link_s` (preflight): ``SPORCH_FAULT_SLOW_NODE=<node>`` makes that node's ranks wait
  ``SPORCH_FAULT_SLOW_S`` seconds inside every timed transfer, as a bad link would;
- :func:`hides_weights` (preflight): ``SPORCH_FAULT_HIDE_WEIGHTS=<node>`` makes that node report
  the weights path missing;
- :func:`swaps_shards` (generate): ``SPORCH_FAULT_SWAP_SHARDS=<dp>x<cfg>x<ring>x<ulysses>`` swaps
  the first two sequence shards of the gathered tokens in a run of that layout: a deliberately
  wrong layout (docs/campaigns.md, "Same output across layouts");
- :func:`wrong_shard` (verify): ``SPORCH_FAULT_WRONG_SHARD=<rank>`` adds 1 to that rank's shard of
  the sharded output before the gather, so ``--verify`` must fail.

Standard library only.
"""

from __future__ import annotations

from typing import Mapping, Optional, Tuple

from sporch.orchestrator.contract.numbers import is_digits
from sporch.orchestrator.contract.settings import Setting, raw, read

HANG_RANK = Setting("SPORCH_FAULT_HANG_RANK", "int", "The rank that hangs before a collective "
                    "(with SPORCH_FAULT_HANG_BEFORE).", "runtime")
HANG_BEFORE = Setting("SPORCH_FAULT_HANG_BEFORE", "text", "The collective (kind or name) that rank hangs before.",
                      "runtime")
HANG_S = Setting("SPORCH_FAULT_HANG_S", "seconds", "How long that rank sleeps.", "runtime", default="3600")
SLOW_NODE = Setting("SPORCH_FAULT_SLOW_NODE", "text", "The node whose timed preflight transfers are slowed.",
                    "runtime")
SLOW_S = Setting("SPORCH_FAULT_SLOW_S", "seconds", "The delay added to each of that node's timed transfers.",
                 "runtime", default="0.2")
HIDE_WEIGHTS = Setting("SPORCH_FAULT_HIDE_WEIGHTS", "text", "The node that reports model.weights missing "
                       "in preflight.", "runtime")
SWAP_SHARDS = Setting("SPORCH_FAULT_SWAP_SHARDS", "text", "The layout (dp x cfg x ring x ulysses, e.g. 1x1x1x2) "
                      "whose generate run swaps its first two sequence shards.", "runtime")

WRONG_SHARD = Setting("SPORCH_FAULT_WRONG_SHARD", "int", "The rank whose shard of a verify job's sharded output is "
                      "made wrong (verification must fail).", "runtime")

#: Every hook, in the order docs/settings.md lists them.
HOOKS: Tuple[Setting, ...] = (HANG_RANK, HANG_BEFORE, HANG_S, SLOW_NODE, SLOW_S, HIDE_WEIGHTS, SWAP_SHARDS,
                              WRONG_SHARD)


def _or(setting: Setting, fallback, environ: Optional[Mapping[str, str]]):
    """The hook's value; ``fallback`` when it is malformed (a test hook never stops a run)."""
    try:
        return read(setting, environ)
    except ValueError:
        return fallback


def hang_before(rank: int, environ: Optional[Mapping[str, str]] = None) -> Optional[Tuple[str, float]]:
    """``(collective kind or name, seconds)`` when ``rank`` is the one to hang; both variables, or nothing."""
    who, before = raw(HANG_RANK, environ), raw(HANG_BEFORE, environ)
    if not who or not before or not is_digits(who) or int(who) != rank:
        return None
    return before, _or(HANG_S, 3600.0, environ)


def slow_link_s(node: str, environ: Optional[Mapping[str, str]] = None) -> float:
    """Seconds to add inside each timed transfer of ``node``'s ranks (0 unless it is the slow node)."""
    slow = raw(SLOW_NODE, environ)
    return float(read(SLOW_S, environ)) if slow and slow == node else 0.0


def hides_weights(node: str, environ: Optional[Mapping[str, str]] = None) -> bool:
    """Whether ``node`` reports the weights path missing."""
    return raw(HIDE_WEIGHTS, environ) == node


def swap_shards_set(environ: Optional[Mapping[str, str]] = None) -> bool:
    """Whether the shard-swapping hook is set at all (the gather then goes through :func:`swaps_shards`)."""
    return raw(SWAP_SHARDS, environ) is not None


def swaps_shards(layout_name: str, environ: Optional[Mapping[str, str]] = None) -> bool:
    """Whether a run of layout ``layout_name`` (``dpxcfgxringxulysses``) swaps its first two shards."""
    return raw(SWAP_SHARDS, environ) == layout_name


def wrong_shard(rank: int, environ: Optional[Mapping[str, str]] = None) -> bool:
    """Whether ``rank`` is the verify job's rank whose shard is made wrong."""
    return raw(WRONG_SHARD, environ) == str(rank)
