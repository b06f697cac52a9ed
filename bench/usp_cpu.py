"""CPU benchmark of USP attention on real gloo ranks vs single-process SDPA.

    python bench/usp_cpu.py                      # B=1, S=4096, H=16, D=64, 4 ranks, fp32 + bf16
    python bench/usp_cpu.py --seq 1024 --repeat 3

Every rank runs with ``torch.set_num_threads(1)``; the baseline is one process, one thread,
``torch.nn.functional.scaled_dot_product_attention`` on the whole (unsharded) problem.

Columns (median over ``--repeat`` timed calls, after ``--warmup`` calls):

* ``work ratio`` = (sum over ranks of the CPU time of one ``usp_attention`` call, measured with
  ``time.process_time`` in each rank: kernels, copies, merges and gloo's own threads) / (the
  baseline's time). 1.00 means the sharded attention costs no more total CPU work than the
  unsharded one; the target is <= 1.03. Time a rank spends blocked waiting for a peer is not
  CPU time and is not in it.
* ``wall ratio`` = (wall time of one call, the slowest rank, between barriers) x
  min(ranks, cores) / (baseline time): the ideal is 1.00 when the ranks fill the cores
  perfectly. On a machine with fewer cores than ranks the ranks time-share the cores, so this
  includes scheduling noise; it is the honest end-to-end number.
* ``sent/min``: bytes this layout's ranks sent (sum over ranks, every collective, from
  :class:`sporch.runtime.attention.CommStats`) / the theoretical minimum (:func:`usp_min_bytes`).
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time

_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if _ROOT not in sys.path:
    sys.path.insert(0, _ROOT)

DTYPES = {"fp32": "float32", "bf16": "bfloat16", "fp16": "float16"}


def _rank_body(layouts, dtypes, B, S, H, D, warmup, repeat, backend):
    import torch
    import torch.distributed as dist

    from sporch.runtime.attention import CommStats, usp_attention, usp_min_bytes
    from sporch.runtime.parallel import ParallelContext

    rows = []
    for (U, R) in layouts:
        ctx = ParallelContext.from_layout(ring=R, ulysses=U)
        for name in dtypes:
            dtype = getattr(torch, DTYPES[name])
            L = ctx.local_len(S)
            g = torch.Generator().manual_seed(ctx.rank)
            q, k, v = (torch.randn(B, L, H, D, generator=g).to(dtype) for _ in range(3))
            walls, cpus = [], []
            stats = CommStats()
            for i in range(warmup + repeat):
                stats.reset()
                dist.barrier()
                w0, c0 = time.perf_counter(), time.process_time()
                usp_attention(q, k, v, ctx, seq_len=S, backend=backend, stats=stats)
                c1 = time.process_time()
                dist.barrier()
                w1 = time.perf_counter()
                if i >= warmup:
                    walls.append(w1 - w0)
                    cpus.append(c1 - c0)
            minimum = usp_min_bytes(batch=B, local_len=L, num_heads=H, num_kv_heads=H, head_dim=D, ulysses=U,
                                    ring=R, ulysses_rank=ctx.ulysses_rank, itemsize=q.element_size())
            rows.append(dict(layout=(U, R), dtype=name, walls=walls, cpus=cpus, sent=sum(stats.sent.values()),
                             minimum=sum(minimum.values())))
    return rows


def _baseline(dtype_name, B, S, H, D, warmup, repeat):
    import torch
    import torch.nn.functional as F

    torch.set_num_threads(1)
    dtype = getattr(torch, DTYPES[dtype_name])
    g = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(B, H, S, D, generator=g).to(dtype) for _ in range(3))
    times = []
    for i in range(warmup + repeat):
        t0 = time.perf_counter()
        F.scaled_dot_product_attention(q, k, v)
        if i >= warmup:
            times.append(time.perf_counter() - t0)
    return statistics.median(times)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--batch", type=int, default=1)
    ap.add_argument("--seq", type=int, default=4096)
    ap.add_argument("--heads", type=int, default=16)
    ap.add_argument("--dim", type=int, default=64)
    ap.add_argument("--ranks", type=int, default=4)
    ap.add_argument("--layouts", default=None, help="comma list of UxR (ulysses x ring); default: all for --ranks")
    ap.add_argument("--dtypes", default="fp32,bf16")
    ap.add_argument("--warmup", type=int, default=1)
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--backend", default="auto")
    args = ap.parse_args(argv)

    from sporch.runtime.testing import run_distributed

    P = args.ranks
    if args.layouts:
        layouts = [tuple(int(x) for x in s.lower().split("x")) for s in args.layouts.split(",")]
    else:
        layouts = [(u, P // u) for u in sorted((d for d in range(1, P + 1) if P % d == 0), reverse=True)]
    dtypes = args.dtypes.split(",")
    cores = os.cpu_count() or 1
    base = {d: _baseline(d, args.batch, args.seq, args.heads, args.dim, args.warmup, args.repeat) for d in dtypes}
    results = run_distributed(_rank_body, P, layouts, dtypes, args.batch, args.seq, args.heads, args.dim,
                              args.warmup, args.repeat, args.backend, timeout=3600)

    print(f"USP attention on CPU (gloo): B={args.batch} S={args.seq} H={args.heads} D={args.dim}, {P} ranks x 1 "
          f"thread, {cores} cores; baseline: 1-process 1-thread SDPA; median of {args.repeat}")
    header = f"{'U x R':>6} {'dtype':>5} {'sdpa s':>8} {'rank cpu s':>10} {'work ratio':>10} {'wall s':>8} " \
             f"{'wall ratio':>10} {'sent MiB':>9} {'min MiB':>8} {'sent/min':>8}"
    print(header)
    print("-" * len(header))
    bad = []
    for i, (U, R) in enumerate(layouts):
        for j, d in enumerate(dtypes):
            rows = [res[i * len(dtypes) + j] for res in results]
            cpu = sum(statistics.median(r["cpus"]) for r in rows)
            walls = [max(r["walls"][t] for r in rows) for t in range(args.repeat)]
            wall = statistics.median(walls)
            sent = sum(r["sent"] for r in rows)
            minimum = sum(r["minimum"] for r in rows)
            ratio = sent / minimum if minimum else (1.0 if sent == 0 else float("inf"))
            print(f"{f'{U}x{R}':>6} {d:>5} {base[d]:8.3f} {cpu / P:10.3f} {cpu / base[d]:10.3f} {wall:8.3f} "
                  f"{wall * min(P, cores) / base[d]:10.3f} {sent / 2**20:9.2f} {minimum / 2**20:8.2f} "
                  f"{ratio:8.3f}")
            if sent != minimum:
                bad.append(f"{U}x{R} {d}: sent {sent} bytes, the minimum is {minimum}")
    for line in bad:
        print(f"FAILED: {line}", file=sys.stderr)
    return 1 if bad else 0


if __name__ == "__main__":
    raise SystemExit(main())
