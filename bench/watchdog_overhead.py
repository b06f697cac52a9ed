"""What entering a collective under the watchdog costs, in microseconds. Never imports torch.

    python bench/watchdog_overhead.py [--calls 20000] [--runs 5]

Prints a table: the median over ``--runs`` of the time per collective of an empty ``with`` block
(the loop itself), of ``watchdog.collective(...)`` with no marker (gloo) and with a marker that
has completed (NCCL's CUDA event, here a stand-in), and the watchdog's cost above the loop. A
collective itself takes milliseconds; the watchdog's share should stay a few microseconds.

The test suite checks why it is cheap without a clock (tests/runtime/test_watchdog.py: the calls
the hot path makes, nothing written, nothing woken); this script is where the number lives.
"""

from __future__ import annotations

import argparse
import contextlib
import statistics
import time


class _Done:
    """A marker that has completed (``query()`` is True)."""

    def query(self) -> bool:
        return True


def per_call(make, calls: int, runs: int) -> float:
    """Median seconds per ``with make():`` over ``runs`` loops of ``calls`` each."""
    out = []
    for _ in range(runs):
        start = time.perf_counter()
        for _ in range(calls):
            with make():
                pass
        out.append((time.perf_counter() - start) / calls)
    return statistics.median(out)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--calls", type=int, default=20000)
    ap.add_argument("--runs", type=int, default=5)
    args = ap.parse_args()
    from sporch.runtime.watchdog.thread import Watchdog

    ranks = [0, 1, 2, 3]
    gloo = Watchdog(rank=0, world_size=4, timeout_s=60)
    nccl = Watchdog(rank=0, world_size=4, timeout_s=60, marker=_Done)
    null = contextlib.nullcontext()
    rows = [
        ("empty with block (the loop)", per_call(lambda: null, args.calls, args.runs)),
        ("watchdog, no marker (gloo)", per_call(
            lambda: gloo.collective("ulysses_qkv", ranks, kind="all_to_all", group="ulysses", layer=1),
            args.calls, args.runs)),
        ("watchdog, completed marker (nccl)", per_call(
            lambda: nccl.collective("ulysses_qkv", ranks, kind="all_to_all", group="ulysses", layer=1),
            args.calls, args.runs)),
    ]
    rows.append(("watchdog above the loop (gloo)", rows[1][1] - rows[0][1]))
    width = max(len(name) for name, _ in rows)
    print(f"{'per collective'.ljust(width)}  {'us':>8}   median of {args.runs} x {args.calls} calls")
    for name, seconds in rows:
        print(f"{name.ljust(width)}  {seconds * 1e6:>8.2f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
